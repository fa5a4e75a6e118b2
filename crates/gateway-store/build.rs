// The migrations live outside this crate's directory; make cargo re-embed them when they change.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations/sqlite");
    println!("cargo:rerun-if-changed=../../migrations/postgres");
}
