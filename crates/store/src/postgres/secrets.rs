//! [`crate::SecretStore`] on PostgreSQL: the body SQLite runs too.

use super::Postgres;
use crate::secrets::secret_store;

secret_store!(Postgres, |_store| ());
