//! The result of a command run in a machine or on the host.

/// stdout, stderr and exit status of a finished command.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Output {
    pub stdout: String,
    pub stderr: String,
    /// The exit status; -1 when the process was ended by a signal or the status is unknown.
    pub status: i32,
}

impl Output {
    pub fn success(&self) -> bool {
        self.status == 0
    }

    /// One line describing the outcome, for errors and wait messages.
    pub fn describe(&self) -> String {
        format!(
            "exit {}; stdout: {}; stderr: {}",
            self.status,
            crate::wait::summarize(&self.stdout),
            crate::wait::summarize(&self.stderr)
        )
    }
}
