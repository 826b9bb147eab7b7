//! The `car-server` binary; everything lives in the library (`car_server`).

use clap::Parser;

fn main() -> std::process::ExitCode {
    car_server::main_with(car_server::config::Args::parse())
}
