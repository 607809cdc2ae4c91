#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| gatebot::fuzzing::web_form(input));
