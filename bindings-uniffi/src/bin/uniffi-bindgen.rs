//! The workspace's pinned `uniffi-bindgen`: generates the Kotlin and Swift sources from the
//! built `car_runtime_uniffi` library (`generate --library <lib> --language kotlin|swift`).
//! It is built from the same `uniffi` version as the library, so checksums always agree.

fn main() {
    uniffi::uniffi_bindgen_main()
}
