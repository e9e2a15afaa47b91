//! Doing and undoing one fault against a running [`Cluster`]: returns once the fault is undone (and the machine or
//! member it touched is back), with the name of the machine it touched, if any.

use std::time::Duration;

use super::resources;
use super::schedule::Fault;
use crate::cluster::Cluster;

/// Injects `fault`, holds it for its duration, undoes it. Returns the touched machine's name (for a machine fault
/// and the engine churn) or the killed etcd member's container (for an etcd leader kill).
pub async fn apply(cluster: &Cluster, fault: &Fault) -> Result<Option<String>, String> {
    let err = |e: &dyn std::fmt::Display| e.to_string();
    match fault {
        Fault::MachineKill { slot, down } => {
            let m = cluster.machine(*slot).map_err(|e| err(&e))?;
            m.kill().await.map_err(|e| err(&e))?;
            tokio::time::sleep(*down).await;
            m.start().await.map_err(|e| err(&e))?;
            Ok(Some(m.name().to_string()))
        }
        Fault::FleetdKill { slot } => {
            let m = cluster.machine(*slot).map_err(|e| err(&e))?;
            m.exec_ok(&["systemctl", "kill", "--signal=SIGKILL", "fleet.service"]).await.map_err(|e| err(&e))?;
            // `restart`, not `start`: a start job waits out `RestartSec=` of the auto-restart systemd schedules.
            m.exec_ok(&["systemctl", "restart", "fleet.service"]).await.map_err(|e| err(&e))?;
            m.wait_api(cluster.wait_options()).await.map_err(|e| err(&e))?;
            Ok(Some(m.name().to_string()))
        }
        Fault::EngineLeaderChurn => {
            let id = engine_leader(cluster).await?;
            let m = cluster
                .machines()
                .iter()
                .find(|m| m.id() == id)
                .ok_or_else(|| format!("the engine leader {id} is no machine of the cluster"))?;
            m.exec_ok(&["systemctl", "restart", "fleet.service"]).await.map_err(|e| err(&e))?;
            m.wait_api(cluster.wait_options()).await.map_err(|e| err(&e))?;
            Ok(Some(m.name().to_string()))
        }
        Fault::Partition { slot, down, .. } => {
            let m = cluster.machine(*slot).map_err(|e| err(&e))?;
            m.partition().await.map_err(|e| err(&e))?;
            tokio::time::sleep(*down).await;
            m.heal().await.map_err(|e| err(&e))?;
            Ok(Some(m.name().to_string()))
        }
        Fault::EtcdMemberKill { index, down } => {
            let member = cluster.etcd_members().get(*index).ok_or_else(|| format!("no etcd member {index}"))?;
            member.kill().await.map_err(|e| err(&e))?;
            tokio::time::sleep(*down).await;
            cluster.start_etcd_member(*index).await.map_err(|e| err(&e))?;
            Ok(None)
        }
        Fault::EtcdLeaderKill { down } => {
            let index = cluster.etcd_leader().await.map_err(|e| err(&e))?;
            let name = cluster.etcd_members()[index].name().to_string();
            cluster.etcd_members()[index].kill().await.map_err(|e| err(&e))?;
            tokio::time::sleep(*down).await;
            cluster.start_etcd_member(index).await.map_err(|e| err(&e))?;
            Ok(Some(name))
        }
        Fault::DiskFull { slot, down } => {
            let m = cluster.machine(*slot).map_err(|e| err(&e))?;
            resources::fill(m).await?;
            tokio::time::sleep(*down).await;
            resources::free(m).await?;
            Ok(Some(m.name().to_string()))
        }
        Fault::ClockJump { slot, ahead, down } => {
            let m = cluster.machine(*slot).map_err(|e| err(&e))?;
            resources::skew(cluster, m, Some(*ahead)).await?;
            tokio::time::sleep(*down).await;
            resources::skew(cluster, m, None).await?;
            Ok(Some(m.name().to_string()))
        }
        Fault::SlowEtcd { delay_ms, down } => {
            let delay = format!("{delay_ms}ms");
            let mut netem_ok = true;
            for member in cluster.etcd_members() {
                match netem(member, &["qdisc", "add", "dev", "eth0", "root", "netem", "delay", &delay]).await {
                    Ok(()) => {}
                    Err(e) if e.contains("qdisc kind is unknown") => {
                        netem_ok = false;
                        break;
                    }
                    Err(e) => return Err(e),
                }
            }
            if netem_ok {
                tokio::time::sleep(*down).await;
                for member in cluster.etcd_members() {
                    netem(member, &["qdisc", "del", "dev", "eth0", "root"]).await?;
                }
                return Ok(None);
            }
            // This kernel has no sch_netem: etcd is made slow by freezing every member for `delay_ms` out of every
            // `delay_ms + 100 ms` (cgroup freezer, `docker pause`), which delays each request by up to `delay_ms`.
            tracing::info!("no netem qdisc in this kernel; slowing etcd with freeze cycles instead");
            let names: Vec<&str> = cluster.etcd_members().iter().map(|m| m.name()).collect();
            let until = tokio::time::Instant::now() + *down;
            let (mut cycles, mut failed) = (0u32, Vec::new());
            while tokio::time::Instant::now() < until {
                cycles += 1;
                // The cgroup freezer can fail under load (`OCI runtime pause failed: unable to freeze`), leaving
                // some members paused: thaw every member one by one, and give up only if it keeps failing.
                if let Err(e) = docker_all("pause", &names).await {
                    failed.push(e);
                    thaw(&names).await;
                    if failed.len() > 3 {
                        return Err(format!(
                            "{} of {cycles} freeze cycles failed: {}",
                            failed.len(),
                            failed.join("; ")
                        ));
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                tokio::time::sleep(Duration::from_millis(*delay_ms)).await;
                if let Err(e) = docker_all("unpause", &names).await {
                    thaw(&names).await;
                    return Err(e);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let failures = if failed.is_empty() {
                String::new()
            } else {
                format!(", {} of {cycles} failed to freeze ({})", failed.len(), failed.join("; "))
            };
            Ok(Some(format!("freeze cycles: no netem in this kernel{failures}")))
        }
    }
}

/// `docker unpause` of each of `names` on its own, ignoring refusals (a member the failed pause left running).
async fn thaw(names: &[&str]) {
    for name in names {
        let _ = crate::docker::run(&["unpause", name]).await;
    }
}

/// `docker <verb> <names…>` (pause / unpause).
async fn docker_all(verb: &str, names: &[&str]) -> Result<(), String> {
    let mut args = vec![verb];
    args.extend(names);
    crate::docker::run(&args).await.map(drop).map_err(|e| e.to_string())
}

/// `tc <args>` in etcd member's network namespace, from the host (`nsenter -t <pid> -n`; needs iproute2).
async fn netem(member: &crate::etcd::Etcd, args: &[&str]) -> Result<(), String> {
    let pid = member
        .host_pid()
        .await
        .map_err(|e| e.to_string())?
        .ok_or_else(|| format!("etcd {} is not running", member.name()))?;
    let out = tokio::process::Command::new("nsenter")
        .args(["-t", &pid.to_string(), "-n", "tc"])
        .args(args)
        .output()
        .await
        .map_err(|e| format!("nsenter/tc (install iproute2: ci/setup): {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`nsenter -t {pid} -n tc {}` for etcd {}: {}",
            args.join(" "),
            member.name(),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The machine ID in the engine leader key, read with etcdctl in the first etcd member that answers; waits up to
/// 30 s for a leader (one may be between terms).
async fn engine_leader(cluster: &Cluster) -> Result<String, String> {
    let key = format!("{}engine/leader", cluster.key_prefix());
    let what = "an engine leader in etcd";
    let wait = crate::wait::WaitOptions::secs(30).with_poll(Duration::from_millis(250));
    crate::wait::wait_for(wait, what, || async {
        let mut last = String::from("no etcd member answered");
        for member in cluster.etcd_members() {
            match member.etcdctl(&["get", "--print-value-only", &key]).await {
                Ok(out) if out.success() && !out.stdout.trim().is_empty() => {
                    return crate::wait::Check::Ready(out.stdout.trim().to_string());
                }
                Ok(out) => last = format!("{}: {}", member.name(), out.describe()),
                Err(e) => last = e.to_string(),
            }
        }
        crate::wait::Check::NotYet(last)
    })
    .await
    .map_err(|e| e.to_string())
}
