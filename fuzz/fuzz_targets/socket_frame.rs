#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &str| gatebot::fuzzing::socket_frame(input));
