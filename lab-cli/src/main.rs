//! The `lab` command: argument parsing and output; the work happens in the library crates.

fn main() {
    println!("lab: not yet");
}
