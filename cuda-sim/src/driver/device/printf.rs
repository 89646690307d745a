//! Device `printf` output, kept until the host synchronises (or the process exits) and then
//! printed on stdout, as the GPU's output is.

use std::io::Write;
use std::sync::Mutex;

/// Output not printed yet.
static PENDING: Mutex<String> = Mutex::new(String::new());

/// Keeps a launch's output until the next synchronisation.
pub fn keep(text: &str) {
    if !text.is_empty() {
        PENDING
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push_str(text);
    }
}

/// Prints the output kept so far.
pub fn flush() {
    let text = std::mem::take(&mut *PENDING.lock().unwrap_or_else(|p| p.into_inner()));
    if !text.is_empty() {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(text.as_bytes());
        let _ = out.flush();
    }
}
