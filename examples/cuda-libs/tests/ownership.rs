//! The parts of the declarations that need only the driver, on the simulated driver of
//! `cuda-sim`: each handle keeps its stream and context alive until it drops, whatever
//! order the program drops them in, and a missing library is an `Err`, not a panic. (The
//! libraries themselves need a GPU: `examples/gemm.rs` and `examples/all_reduce.rs`.)

mod common;

use common::{on_simulator, stand_in};
use handles_cuda::{ContextHandle, StreamFlags, StreamHandle};
use handles_cuda_libs::{
    Cublas, CublasHandle, CublasLt, CublasLtHandle, Cudnn, CudnnHandle, LibError,
};

#[test]
fn owners_outlive_what_the_program_drops_on_the_simulator() {
    on_simulator(
        "owners_outlive_what_the_program_drops_on_the_simulator",
        1,
        child,
    );
}

fn child() {
    let context = ContextHandle::primary(0).unwrap();
    let stream = StreamHandle::create(&context, StreamFlags { non_blocking: true }, 0).unwrap();
    // SAFETY: a stand-in raw value that nothing dereferences; the handle owns and deletes
    // nothing; its record holds live handles.
    let cublas = unsafe {
        CublasHandle::from_raw_borrowed(
            stand_in(),
            Cublas {
                stream: stream.clone(),
                context: context.clone(),
            },
        )
    };
    // SAFETY: as for `cublas`.
    let cudnn = unsafe {
        CudnnHandle::from_raw_borrowed(
            stand_in(),
            Cudnn {
                stream: stream.clone(),
                context: context.clone(),
            },
        )
    };
    // SAFETY: as for `cublas`.
    let lt = unsafe {
        CublasLtHandle::from_raw_borrowed(
            stand_in(),
            CublasLt {
                context: context.clone(),
            },
        )
    };
    let (weak_stream, weak_context) = (stream.downgrade(), context.downgrade());
    // The program drops its stream and context first.
    drop((stream, context));
    handles_cuda::exec::clear_primary_cache();
    cublas.stream().synchronize().unwrap(); // the driver still accepts the stream
    drop(cublas);
    assert!(
        weak_stream.upgrade().is_some(),
        "cuDNN's handle still holds the stream"
    );
    drop(cudnn);
    assert!(
        weak_stream.upgrade().is_none(),
        "the stream went with its last holder"
    );
    assert!(
        weak_context.upgrade().is_some(),
        "cuBLASLt's handle still holds the context"
    );
    lt.context().synchronize().unwrap();
    drop(lt);
    assert!(weak_context.upgrade().is_none());

    // Without a library, its constructor is an `Err` naming it, never a panic. (Where a
    // library is installed, on a GPU machine, it is not called on the simulated driver.)
    let context = ContextHandle::primary(0).unwrap();
    let stream = StreamHandle::create(&context, StreamFlags::default(), 0).unwrap();
    // SAFETY: only probes whether each library can be opened; calls nothing in them.
    let present = unsafe {
        [
            cudarc::cublas::sys::is_culib_present(),
            cudarc::cudnn::sys::is_culib_present(),
            cudarc::cublaslt::sys::is_culib_present(),
            cudarc::nccl::sys::is_culib_present(),
        ]
    };
    let constructors: [&dyn Fn() -> Result<(), LibError>; 4] = [
        &|| CublasHandle::new(&stream).map(drop),
        &|| CudnnHandle::new(&stream).map(drop),
        &|| CublasLtHandle::new(&context).map(drop),
        &|| handles_cuda_libs::NcclCommHandle::init_all(std::slice::from_ref(&stream)).map(drop),
    ];
    for (present, construct) in present.into_iter().zip(constructors) {
        if present {
            println!("child: a library is installed here; not called on the simulated driver");
            continue;
        }
        match construct() {
            Err(LibError::Missing(library)) => println!("child: {library} missing, as expected"),
            other => panic!("expected a missing library, got {other:?}"),
        }
    }
    println!("child: owners checked");
}
