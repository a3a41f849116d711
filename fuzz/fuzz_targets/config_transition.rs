#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| chitin_fuzz::config_transition(data));
