//! Without an NVIDIA driver, every entry point returns a clear error and nothing panics. On a
//! machine with a driver, the same calls succeed; either way the test asserts what it saw.

use handles_cuda::{
    ContextHandle, DevicePtrHandle, Error, EventHandle, MemoryPoolHandle, PoolProps, StreamHandle,
    exec::EventFlags,
};

#[test]
fn entry_points_return_driver_not_found_or_work() {
    match handles_cuda::driver::ensure_loaded() {
        Err(Error::DriverNotFound) => {
            assert!(!handles_cuda::driver::is_available());
            assert_eq!(
                handles_cuda::driver::device_count(),
                Err(Error::DriverNotFound)
            );
            assert_eq!(
                ContextHandle::primary(0).unwrap_err(),
                Error::DriverNotFound
            );
            assert_eq!(ContextHandle::current().unwrap_err(), Error::DriverNotFound);
            assert_eq!(
                handles_cuda::exec::Device::new(0).unwrap_err(),
                Error::DriverNotFound
            );
            assert_eq!(
                MemoryPoolHandle::import_from_process(std::process::id(), 0, 0).unwrap_err(),
                Error::DriverNotFound
            );
            assert_eq!(
                EventHandle::create_in_current(EventFlags::default()).unwrap_err(),
                Error::DriverNotFound
            );
            assert_eq!(
                MemoryPoolHandle::create(&PoolProps::device(0)).unwrap_err(),
                Error::DriverNotFound
            );
            assert_eq!(
                handles_cuda::LibraryHandle::load_ptx(handles_tests::kernels::PTX).unwrap_err(),
                Error::DriverNotFound
            );
            assert_eq!(
                handles_cuda::graph::GraphHandle::create(&unsafe_free_reference()).unwrap_err(),
                Error::DriverNotFound
            );
            assert_eq!(
                handles_cuda::exec::EventRecycler::new(
                    &unsafe_free_reference(),
                    EventFlags::default()
                )
                .unwrap_err(),
                Error::DriverNotFound
            );
            assert_eq!(
                handles_cuda::exec::StreamRecycler::new(
                    &unsafe_free_reference(),
                    handles_cuda::StreamFlags::default(),
                    0
                )
                .unwrap_err(),
                Error::DriverNotFound
            );
            assert_eq!(
                StreamHandle::legacy_in(&unsafe_free_reference()).unwrap_err(),
                Error::DriverNotFound
            );
            // The built-in stream tokens exist without a driver; using them must not panic.
            let legacy = StreamHandle::legacy();
            assert_eq!(legacy.synchronize().unwrap_err(), Error::DriverNotFound);
            assert_eq!(
                StreamHandle::per_thread().synchronize().unwrap_err(),
                Error::DriverNotFound
            );
            assert_eq!(
                DevicePtrHandle::alloc_async(64, &legacy).unwrap_err(),
                Error::DriverNotFound
            );
            assert_eq!(
                MemoryPoolHandle::device_current(0).unwrap_err(),
                Error::DriverNotFound
            );
            assert_eq!(
                Error::DriverNotFound.to_string(),
                "no CUDA driver found: libcuda could not be loaded"
            );
        }
        Err(other) => panic!("a driver is present but failed to initialise: {other}"),
        Ok(()) => {
            assert!(handles_cuda::driver::device_count().unwrap() >= 1);
            assert!(ContextHandle::primary(0).is_ok());
        }
    }
}

#[test]
fn malformed_ipc_payloads_are_rejected_before_the_driver() {
    assert!(matches!(
        handles_cuda::ipc::IpcPointer::from_bytes(&[0u8; 10]),
        Err(Error::BadIpcPayload { .. })
    ));
    let mut zero_size = [7u8; handles_cuda::ipc::IpcPointer::LEN];
    zero_size[64..].copy_from_slice(&0u64.to_le_bytes());
    assert!(handles_cuda::ipc::IpcPointer::from_bytes(&zero_size).is_err());
    let pointer = handles_cuda::ipc::IpcPointer {
        export_data: [3; 64],
        size: 4096,
    };
    assert_eq!(
        handles_cuda::ipc::IpcPointer::from_bytes(&pointer.to_bytes()),
        Ok(pointer)
    );
    assert!(handles_cuda::ipc::IpcEventHandle::from_bytes(&[1u8; 63]).is_err());
    assert!(handles_cuda::ipc::IpcEventHandle::from_bytes(&[1u8; 64]).is_err());
    assert!(
        handles_cuda::ipc::IpcEventHandle::from_bytes(&[2u8; 65]).is_err(),
        "flags byte 2"
    );
    assert!(handles_cuda::ipc::IpcEventHandle::from_bytes(&[1u8; 65]).is_ok());
}

/// A context reference for calls that must fail before they use it.
fn unsafe_free_reference() -> ContextHandle {
    // SAFETY: a reference that nothing dereferences: every call given it fails first because
    // no driver is loaded.
    unsafe {
        ContextHandle::from_raw_borrowed(
            std::ptr::null_mut(),
            handles_cuda::exec::Context::reference(None),
        )
    }
}

#[test]
fn nvrtc_calls_return_nvrtc_not_found_or_work() {
    let source = "extern \"C\" __global__ void noop() {}";
    match handles_cuda::code::ProgramHandle::new(source, "noop.cu") {
        Err(Error::NvrtcNotFound) => {
            assert_eq!(
                handles_cuda::code::nvrtc_version(),
                Err(Error::NvrtcNotFound)
            );
        }
        Ok(program) => {
            assert!(handles_cuda::code::nvrtc_version().unwrap().0 >= 11);
            program.compile(&[]).unwrap();
            assert!(!program.ptx().unwrap().is_empty());
        }
        Err(other) => panic!("neither NvrtcNotFound nor a program: {other}"),
    }
}

/// Errors that are not about the caller's arguments do not say "invalid argument"; those that
/// are do, and each message carries its values.
#[test]
fn error_messages_say_what_kind_of_error_they_are() {
    let not_arguments = [
        Error::Unordered {
            what: "a use of this memory on another stream could not be ordered",
        },
        Error::NothingMade {
            what: "the allocation made no pointer",
        },
        Error::Revoking,
        Error::Capturing,
        Error::DriverAnomaly {
            call: "cuKernelGetParamInfo",
            what: "more than 4096 parameters".into(),
        },
        Error::FdTake {
            call: "pidfd_getfd",
            pid: 4242,
            fd: 7,
            errno: libc::EPERM,
        },
    ];
    for error in &not_arguments {
        assert!(
            !error.to_string().starts_with("invalid argument"),
            "{error}"
        );
    }
    let arguments = [
        (
            Error::ElementsOutOfRange {
                start: usize::MAX,
                count: 2,
                len: 4,
            },
            format!(
                "2 elements from element {} are not within the buffer's 4 elements",
                usize::MAX
            ),
        ),
        (
            Error::ReversedRange { start: 5, end: 3 },
            "the range 5..3 ends before it starts".into(),
        ),
        (
            Error::MisalignedElements {
                address: 0x1004,
                element: "f64",
                align: 8,
            },
            "address 0x1004 is not aligned for f64 (a multiple of 8 bytes)".into(),
        ),
        (
            Error::WrongDevice {
                what: "a device's current pool",
                expected: 1,
                found: Some(0),
            },
            "a device's current pool must be on device 1, and this one is on device 0".into(),
        ),
        (
            Error::TooMany {
                count: 3_000_000_000,
                what: "compiler options",
                max: i32::MAX as usize,
            },
            format!(
                "3000000000 compiler options are more than the {} that can be passed",
                i32::MAX
            ),
        ),
    ];
    for (error, text) in &arguments {
        assert_eq!(error.to_string(), format!("invalid argument: {text}"));
    }
}
