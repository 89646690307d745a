// A kernel parameter list may hold only scalars and `Buffer`: a `String` is refused at compile
// time, with the list of what is accepted.
use handles_cuda::{KernelHandle, code::Buffer};

fn declare(kernel: &KernelHandle) {
    // SAFETY: never reached: this file does not compile.
    let _ = unsafe { kernel.typed::<(Buffer, String)>(|_, _| Ok(())) };
}

fn main() {}
