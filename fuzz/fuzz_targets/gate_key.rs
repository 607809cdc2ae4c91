#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &str| gatebot::fuzzing::gate_key(input));
