//! The cluster's own Docker network: a bridge with a subnet the harness chooses (so that addresses can be pinned
//! when a machine reconnects or is replaced), labelled with the run.

use rand::Rng;

use crate::docker::{self, DockerError};
use crate::labels::{self, RunId};

/// Subnets are `10.<A>.<B>.0/24` with A in this range: away from Docker's default pools and common host routes.
const FIRST_OCTETS: std::ops::RangeInclusive<u8> = 200..=239;
const ATTEMPTS: usize = 30;

/// The network could not be created.
#[derive(Debug, thiserror::Error)]
pub enum NetworkError {
    #[error("could not create network {name}: {source}")]
    Create { name: String, source: DockerError },
    #[error("no free subnet for network {name} after {ATTEMPTS} attempts")]
    NoSubnet { name: String },
}

/// Creates network `name` on a random free /24; returns the subnet.
pub async fn create(name: &str, run: &RunId, keep: bool) -> Result<String, NetworkError> {
    for _ in 0..ATTEMPTS {
        let (a, b) = {
            let mut rng = rand::rng();
            (rng.random_range(FIRST_OCTETS), rng.random::<u8>())
        };
        let subnet = format!("10.{a}.{b}.0/24");
        let mut args =
            vec!["network".to_string(), "create".into(), "--driver=bridge".into(), format!("--subnet={subnet}")];
        for (k, v) in labels::for_run(run, keep, "network") {
            args.push(format!("--label={k}={v}"));
        }
        args.push(name.to_string());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match docker::run(&args).await {
            Ok(_) => {
                tracing::debug!(network = name, %subnet, "network created");
                return Ok(subnet);
            }
            Err(DockerError::Failed { stderr, .. }) if stderr.contains("overlap") => continue,
            Err(source) => return Err(NetworkError::Create { name: name.to_string(), source }),
        }
    }
    Err(NetworkError::NoSubnet { name: name.to_string() })
}
