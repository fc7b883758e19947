//! Time as the service stores and shows it: [`Timestamp`], UTC, RFC 3339 with microseconds and
//! `Z` (`2026-02-10T08:30:00.123456Z`). That text sorts as the time does, which lets the store
//! compare timestamps in SQL.

use std::fmt;

use chrono::{DateTime, SecondsFormat, Utc};

/// A moment in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(DateTime<Utc>);

impl Timestamp {
    pub fn now() -> Self {
        Self(Utc::now())
    }

    /// `after` from now (the end of time when that overflows).
    pub fn after(after: std::time::Duration) -> Self {
        let after = chrono::Duration::from_std(after).unwrap_or(chrono::Duration::MAX);
        Self(
            Utc::now()
                .checked_add_signed(after)
                .unwrap_or(DateTime::<Utc>::MAX_UTC),
        )
    }

    /// `ago` before now (the start of time when that underflows).
    pub fn before(ago: std::time::Duration) -> Self {
        Self(
            chrono::Duration::from_std(ago)
                .ok()
                .and_then(|ago| Utc::now().checked_sub_signed(ago))
                .unwrap_or(DateTime::<Utc>::MIN_UTC),
        )
    }

    /// How long from `earlier` to this moment (zero when `earlier` is later).
    pub fn duration_since(&self, earlier: Timestamp) -> std::time::Duration {
        (self.0 - earlier.0).to_std().unwrap_or_default()
    }

    /// RFC 3339; a time without an offset (as the reference writes its own) is taken as UTC.
    pub fn parse(text: &str) -> Result<Self, chrono::ParseError> {
        DateTime::parse_from_rfc3339(text)
            .map(|t| Self(t.with_timezone(&Utc)))
            .or_else(|e| {
                chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S%.f")
                    .map(|t| Self(t.and_utc()))
                    .map_err(|_| e)
            })
    }
}

impl From<DateTime<Utc>> for Timestamp {
    fn from(time: DateTime<Utc>) -> Self {
        Self(time)
    }
}

impl From<Timestamp> for DateTime<Utc> {
    fn from(time: Timestamp) -> Self {
        time.0
    }
}

impl From<std::time::SystemTime> for Timestamp {
    fn from(time: std::time::SystemTime) -> Self {
        Self(time.into())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.to_rfc3339_opts(SecondsFormat::Micros, true))
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Self::parse(&text).map_err(serde::de::Error::custom)
    }
}

impl utoipa::PartialSchema for Timestamp {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::DateTime,
            )))
            .examples([serde_json::json!("2026-02-10T08:30:00.123456Z")])
            .into()
    }
}

impl utoipa::ToSchema for Timestamp {}

/// A timestamp is stored as its text (RFC 3339 UTC, fixed width, so text order is time
/// order), in SQLite and PostgreSQL alike.
#[cfg(feature = "sqlx")]
mod stored {
    use sqlx::encode::IsNull;
    use sqlx::error::BoxDynError;
    use sqlx::{Database, Decode, Encode, Type};

    use super::Timestamp;

    impl<DB: Database> Type<DB> for Timestamp
    where
        String: Type<DB>,
    {
        fn type_info() -> DB::TypeInfo {
            <String as Type<DB>>::type_info()
        }

        fn compatible(ty: &DB::TypeInfo) -> bool {
            <String as Type<DB>>::compatible(ty)
        }
    }

    impl<'q, DB: Database> Encode<'q, DB> for Timestamp
    where
        String: Encode<'q, DB>,
    {
        fn encode_by_ref(
            &self,
            buf: &mut <DB as Database>::ArgumentBuffer,
        ) -> Result<IsNull, BoxDynError> {
            <String as Encode<'q, DB>>::encode(self.to_string(), buf)
        }
    }

    impl<'r, DB: Database> Decode<'r, DB> for Timestamp
    where
        &'r str: Decode<'r, DB>,
    {
        fn decode(value: <DB as Database>::ValueRef<'r>) -> Result<Self, BoxDynError> {
            let text = <&str as Decode<'r, DB>>::decode(value)?;
            Ok(Self::parse(text)?)
        }
    }
}

/// Now in the compact form used in folder names, e.g. `20260210T083000Z`.
pub fn now_compact() -> String {
    Utc::now().format("%Y%m%dT%H%M%SZ").to_string()
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_and_sorts_as_time() {
        let t = Timestamp::parse("2026-02-10T08:30:00.123456Z").unwrap();
        assert_eq!(t.to_string(), "2026-02-10T08:30:00.123456Z");
        assert_eq!(
            serde_json::to_value(t).unwrap(),
            "2026-02-10T08:30:00.123456Z"
        );
        // Another offset is read as the same moment, shown in UTC.
        let shifted = Timestamp::parse("2026-02-10T09:30:00.123456+01:00").unwrap();
        assert_eq!(shifted, t);
        let (a, b) = (
            Timestamp::before(std::time::Duration::from_secs(1)),
            Timestamp::now(),
        );
        assert!(a < b && a.to_string() < b.to_string());
        assert!(Timestamp::after(std::time::Duration::MAX) > b);
    }
}
