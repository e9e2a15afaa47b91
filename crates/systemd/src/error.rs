//! The one error type of the `systemd` module: what was called, on what, and what systemd (or the bus) answered.

use zbus::DBusError;

/// D-Bus error name systemd answers when a unit is not loaded (`Unit x.service not loaded.`).
pub const NO_SUCH_UNIT: &str = "org.freedesktop.systemd1.NoSuchUnit";
/// D-Bus error name systemd answers when a job no longer exists.
pub const NO_SUCH_JOB: &str = "org.freedesktop.systemd1.NoSuchJob";
/// D-Bus error name of a call to an object path that does not exist (any more).
pub const UNKNOWN_OBJECT: &str = "org.freedesktop.DBus.Error.UnknownObject";

/// Everything that can go wrong talking to systemd.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SystemdError {
    /// The bus itself could not be reached.
    #[error("connecting to the {bus} bus: {message}")]
    Connect { bus: &'static str, message: String },
    /// A method call failed: `name` is the D-Bus error name (empty for transport errors), `message` its text.
    #[error("{call}({target}) failed: {name}: {message}")]
    Call { call: &'static str, target: String, name: String, message: String },
    /// A change of unit files on disk (a runtime link made or removed without a D-Bus call) failed.
    #[error("{op} {path}: {message}")]
    File { op: &'static str, path: String, message: String },
    /// A wait ran out of time.
    #[error("waited {secs} s for {what}")]
    Timeout { what: String, secs: u64 },
    /// The signal stream of the bus ended (connection lost).
    #[error("the D-Bus signal stream ended while waiting for {what}")]
    StreamEnded { what: String },
}

impl SystemdError {
    /// A `File` error of `op` on `path`.
    pub(crate) fn file(op: &'static str, path: &std::path::Path, err: &std::io::Error) -> Self {
        SystemdError::File { op, path: path.display().to_string(), message: err.to_string() }
    }

    /// Build a `Call` error out of whatever zbus reported for `call` on `target`.
    pub(crate) fn call(call: &'static str, target: impl Into<String>, err: zbus::Error) -> Self {
        let (name, message) = match &err {
            zbus::Error::MethodError(name, message, _) => (name.to_string(), message.clone().unwrap_or_default()),
            zbus::Error::FDO(fdo) => (fdo.name().to_string(), fdo.description().unwrap_or_default().to_string()),
            other => (String::new(), other.to_string()),
        };
        SystemdError::Call { call, target: target.into(), name, message }
    }

    /// The D-Bus error name, when systemd answered with an error reply.
    pub fn dbus_name(&self) -> Option<&str> {
        match self {
            SystemdError::Call { name, .. } if !name.is_empty() => Some(name),
            _ => None,
        }
    }

    /// True when systemd says the unit is not loaded (`NoSuchUnit`, or a message ending in "not loaded.").
    pub fn is_not_loaded(&self) -> bool {
        match self {
            SystemdError::Call { name, message, .. } => {
                name == NO_SUCH_UNIT || message.trim_end_matches('.').ends_with("not loaded")
            }
            _ => false,
        }
    }

    /// True when the addressed job or object no longer exists.
    pub(crate) fn is_gone(&self) -> bool {
        matches!(self.dbus_name(), Some(NO_SUCH_JOB | UNKNOWN_OBJECT | NO_SUCH_UNIT))
    }
}

/// Result alias of the module.
pub type Result<T> = std::result::Result<T, SystemdError>;

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, message: &str) -> SystemdError {
        SystemdError::Call {
            call: "ResetFailedUnit",
            target: "a.service".into(),
            name: name.into(),
            message: message.into(),
        }
    }

    #[test]
    fn not_loaded_is_recognised_by_name_or_message() {
        assert!(call(NO_SUCH_UNIT, "Unit a.service not loaded.").is_not_loaded());
        assert!(call("org.freedesktop.DBus.Error.Failed", "Unit a.service not loaded.").is_not_loaded());
        assert!(!call("org.freedesktop.DBus.Error.AccessDenied", "denied").is_not_loaded());
        assert!(!SystemdError::Timeout { what: "x".into(), secs: 1 }.is_not_loaded());
    }

    #[test]
    fn a_file_error_names_the_operation_and_the_path() {
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let err = SystemdError::file("symlink", std::path::Path::new("/run/systemd/system/a.service"), &denied);
        assert_eq!(err.to_string(), format!("symlink /run/systemd/system/a.service: {denied}"));
        assert_eq!(err.dbus_name(), None);
        assert!(!err.is_not_loaded());
    }

    #[test]
    fn message_names_call_target_and_answer() {
        assert_eq!(
            call(NO_SUCH_UNIT, "Unit a.service not loaded.").to_string(),
            "ResetFailedUnit(a.service) failed: org.freedesktop.systemd1.NoSuchUnit: Unit a.service not loaded."
        );
    }
}
