//! Compile-fail and compile-pass cases of `#[derive(ResourceHandle)]`. The `.stderr` snapshots
//! are taken with the pinned toolchain (rust-toolchain.toml); re-bless with
//! `TRYBUILD=overwrite cargo test -p handles-tests --test ui`.

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/fail/*.rs");
    cases.pass("tests/ui/pass/*.rs");
}
