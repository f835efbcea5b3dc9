//! Helpers for the end-to-end tests: finding the built binaries, tools, and what a lab left behind.
