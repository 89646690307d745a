//! Parses PTX files and reports their entries or the load error:
//! `cargo run --example ptxcheck -- file.ptx...`
fn main() {
    let mut failed = false;
    for path in std::env::args().skip(1) {
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) => {
                println!("{path}: {e}");
                failed = true;
                continue;
            }
        };
        match cuda_sim_ptx::Module::parse(&text) {
            Ok(m) => {
                let names: Vec<&str> = m.entries.iter().map(|e| e.name.as_str()).collect();
                println!("{path}: ok {names:?}");
            }
            Err(e) => {
                println!("{path}: {e}");
                failed = true;
            }
        }
    }
    std::process::exit(failed as i32);
}
