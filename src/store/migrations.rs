//! The schema's migrations, compiled into the binary. sqlx's `migrate!` macro
//! would do the same, but it brings sqlx's compile-time machinery with it (a
//! second, host build of sqlx's drivers, tokio and rustls: about a tenth of a
//! cold `cargo test`). These lists are read exactly as sqlx reads a directory;
//! a test checks that they name every file and give the same checksums.

use std::borrow::Cow;

use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};

use super::Backend;

/// A migration file's name and text.
type File = (&'static str, &'static str);

/// Both stores' migrations, one file of each directory per name (`tests/schema.rs`
/// checks that the two build the same schema).
macro_rules! migrations {
    ($($name:literal),* $(,)?) => {
        const SQLITE: &[File] =
            &[$(($name, include_str!(concat!("../../migrations/sqlite/", $name)))),*];
        const POSTGRES: &[File] =
            &[$(($name, include_str!(concat!("../../migrations/postgres/", $name)))),*];
    };
}

// A new migration is a new name here (`migrations_are_the_directorys` fails otherwise).
migrations!(
    "0001_init.sql",
    "0002_replicas.sql",
    "0003_missing_prs.sql",
    "0004_typed_tables.sql",
    "0005_named_gates.sql",
    "0006_wait_deadlines.sql",
    "0007_wait_reminders.sql",
    "0008_freezes.sql",
    "0009_quorum.sql",
    "0010_sessions.sql",
    "0011_named_limits.sql",
    "0012_wait_timers.sql",
    "0013_canary_ties.sql",
    "0014_teams.sql",
    "0015_check_runs.sql",
    "0016_canary_progress.sql",
    "0017_deployments.sql",
    "0018_protection_requests.sql",
    "0019_environments.sql",
    "0020_waits_by_cluster.sql",
    "0021_wait_bounds.sql",
    "0022_protection_sha.sql",
    "0023_quorum_groups.sql",
    "0024_change_tickets.sql",
);

/// The migrations of `backend`, as sqlx's own `Migrator` runs them.
pub(super) async fn migrator(backend: Backend) -> Result<Migrator, sqlx::migrate::MigrateError> {
    Migrator::new(Embedded(match backend {
        Backend::Sqlite => SQLITE,
        Backend::Postgres => POSTGRES,
    }))
    .await
}

#[derive(Debug)]
struct Embedded(&'static [File]);

impl MigrationSource<'static> for Embedded {
    fn resolve(
        self,
    ) -> futures_util::future::BoxFuture<'static, Result<Vec<Migration>, BoxDynError>> {
        Box::pin(async move {
            self.0
                .iter()
                .map(|(name, sql)| migration(name, sql))
                .collect()
        })
    }
}

/// `0004_typed_tables.sql` as sqlx's directory source reads it: version 4,
/// description "typed tables", checksum of the text; `-- no-transaction`
/// first opts out of the transaction.
fn migration(name: &str, sql: &'static str) -> Result<Migration, BoxDynError> {
    let (version, rest) = name
        .split_once('_')
        .filter(|(_, rest)| rest.ends_with(".sql"))
        .ok_or_else(|| format!("{name}: not <VERSION>_<DESCRIPTION>.sql"))?;
    let version: i64 = version.parse().map_err(|_| format!("{name}: no version"))?;
    let migration_type = MigrationType::from_filename(rest);
    let description = rest
        .trim_end_matches(migration_type.suffix())
        .replace('_', " ");
    let no_tx = sql.starts_with("-- no-transaction");
    Ok(Migration::new(
        version,
        Cow::Owned(description),
        migration_type,
        Cow::Borrowed(sql),
        no_tx,
    ))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The lists name every file of the directories, and each migration reads
    /// as sqlx's directory source (which `migrate!` used) reads it: the same
    /// version, description, type, flag and checksum, so that databases
    /// migrated by earlier builds validate.
    #[tokio::test]
    async fn migrations_are_the_directorys() {
        for (dir, backend) in [("sqlite", Backend::Sqlite), ("postgres", Backend::Postgres)] {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("migrations")
                .join(dir);
            let read = Migrator::new(path.as_path()).await.unwrap();
            let listed = migrator(backend).await.unwrap();
            let view = |m: &Migrator| {
                m.iter()
                    .map(|m| {
                        (
                            m.version,
                            m.description.to_string(),
                            m.migration_type,
                            m.checksum.to_vec(),
                            m.no_tx,
                        )
                    })
                    .collect::<Vec<_>>()
            };
            assert_eq!(view(&listed), view(&read), "migrations/{dir}");
        }
    }
}
