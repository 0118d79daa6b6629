//! [`ConfigError`]: what the qdisc builders return for an option `tc` would refuse, naming the
//! option, the value given and the accepted range (the kernel's `EINVAL` with an extack message).

use core::fmt;

/// A rejected qdisc option.
///
/// ```
/// use qdisc::{FqBuilder, TestPacket};
///
/// let err = FqBuilder::new().quantum(0).build::<TestPacket>().unwrap_err();
/// assert_eq!(err.option(), "quantum");
/// assert_eq!(err.to_string(), "fq: invalid quantum 0: accepted 1..=1048576 (bytes)");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    qdisc: &'static str,
    option: &'static str,
    value: String,
    accepted: String,
}

impl ConfigError {
    /// An error for `option` of `qdisc`, given `value`, which accepts `accepted`.
    pub fn new(
        qdisc: &'static str,
        option: &'static str,
        value: impl fmt::Display,
        accepted: impl Into<String>,
    ) -> Self {
        ConfigError {
            qdisc,
            option,
            value: value.to_string(),
            accepted: accepted.into(),
        }
    }

    /// The qdisc kind (`"fq"`, `"pfifo"`, ...).
    pub fn qdisc(&self) -> &'static str {
        self.qdisc
    }

    /// The `tc` option name that was refused.
    pub fn option(&self) -> &'static str {
        self.option
    }

    /// The value that was given, as text.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The accepted values, as text.
    pub fn accepted(&self) -> &str {
        &self.accepted
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: invalid {} {}: accepted {}",
            self.qdisc, self.option, self.value, self.accepted
        )
    }
}

impl std::error::Error for ConfigError {}
