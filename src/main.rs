fn main() -> std::process::ExitCode {
    gatebot::main()
}
