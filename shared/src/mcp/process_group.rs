//! A stdio server's process group ends with its leader. The group (`ProcessGroup::leader`)
//! is killed whole when the session kills the command, but a session that ends gracefully
//! closes stdin and waits: a wrapper (`npx`, `uvx`, a shell) that exits on its own then left
//! everything it started running. So whenever the leader is waited for, the group is killed
//! first, while the leader is still unreaped: its id cannot have been reused by then.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::process::ExitStatus;

use process_wrap::tokio::{ChildWrapper, CommandWrap, CommandWrapper};

/// Wraps the group leader's child (after `ProcessGroup::leader()`).
#[derive(Debug)]
pub struct EndGroupWithLeader;

impl CommandWrapper for EndGroupWithLeader {
    fn wrap_child(&mut self, inner: Box<dyn ChildWrapper>, _core: &CommandWrap) -> io::Result<Box<dyn ChildWrapper>> {
        Ok(Box::new(Leader { inner }))
    }
}

#[derive(Debug)]
struct Leader {
    inner: Box<dyn ChildWrapper>,
}

impl ChildWrapper for Leader {
    fn inner(&self) -> &dyn ChildWrapper {
        self.inner.as_ref()
    }

    fn inner_mut(&mut self) -> &mut dyn ChildWrapper {
        self.inner.as_mut()
    }

    fn into_inner(self: Box<Self>) -> Box<dyn ChildWrapper> {
        self.inner
    }

    fn wait(&mut self) -> Pin<Box<dyn Future<Output = io::Result<ExitStatus>> + Send + '_>> {
        Box::pin(async move {
            // No id: the leader is reaped already, and its id may name another process now.
            if let Some(pid) = self.inner.id() {
                if tokio::task::spawn_blocking(move || exited(pid, true))
                    .await
                    .unwrap_or(false)
                {
                    kill_group(pid);
                }
            }
            self.inner.wait().await
        })
    }

    fn try_wait(&mut self) -> io::Result<Option<ExitStatus>> {
        if let Some(pid) = self.inner.id() {
            if exited(pid, false) {
                kill_group(pid);
            }
        }
        self.inner.try_wait()
    }
}

/// Whether the leader `pid` has exited, left unreaped (`WNOWAIT`); waiting for it when `block`.
fn exited(pid: u32, block: bool) -> bool {
    let flags = libc::WEXITED | libc::WNOWAIT | if block { 0 } else { libc::WNOHANG };
    loop {
        // SAFETY: `info` is a plain C struct waitid fills in; zeroed is a valid value of it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waitid only writes into `info`, which lives across the call.
        let done = unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, flags) };
        if done == 0 {
            // With WNOHANG and the child still running, waitid succeeds with a zero pid.
            // SAFETY: the kernel filled `info` in (or left it zeroed) for this waitid.
            return unsafe { info.si_pid() } != 0;
        }
        if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return false;
        }
    }
}

fn kill_group(pgid: u32) {
    // SAFETY: killpg only sends a signal; a group already gone answers ESRCH.
    unsafe {
        libc::killpg(pgid as libc::pid_t, libc::SIGKILL);
    }
}
