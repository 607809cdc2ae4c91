// The migrations are embedded by `sqlx::migrate!`: rebuild when one is added or edited.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
