//! The machine image: its tag is a hash of its recipe (`ci/image/*`), built by `ci/setup`.

use sha1::{Digest, Sha1};

/// Repository of the machine image.
pub const REPO: &str = "fleet-harness/machine";
/// Environment variable naming another image to use instead (`repo:tag`).
pub const IMAGE_ENV: &str = "FLEET_HARNESS_IMAGE";

const ROOTFS_RECIPE: &str = include_str!("../../ci/image/rootfs");
const DOCKERFILE: &str = include_str!("../../ci/image/Dockerfile");

/// The image could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error("machine image {0} is missing: run ci/setup (as root) to build it")]
    Missing(String),
    #[error("the Docker engine does not answer: run ci/setup (as root) to start it")]
    NoEngine,
}

/// The recipe hash: first 12 hex digits of sha1(rootfs recipe ++ Dockerfile), as `ci/lib.sh` computes it.
pub fn recipe_hash() -> String {
    let mut h = Sha1::new();
    h.update(ROOTFS_RECIPE.as_bytes());
    h.update(DOCKERFILE.as_bytes());
    hex::encode(h.finalize())[..12].to_string()
}

/// `(repository, tag)` of the machine image to run: `FLEET_HARNESS_IMAGE` if set, else the recipe's tag.
pub fn reference() -> (String, String) {
    if let Ok(image) = std::env::var(IMAGE_ENV)
        && let Some((repo, tag)) = image.rsplit_once(':')
    {
        return (repo.to_string(), tag.to_string());
    }
    (REPO.to_string(), recipe_hash())
}

/// Checks that the engine answers and the image exists (testcontainers would otherwise try to pull it).
pub async fn ensure_present() -> Result<(String, String), ImageError> {
    if crate::docker::run(&["info", "--format", "{{.ServerVersion}}"]).await.is_err() {
        return Err(ImageError::NoEngine);
    }
    let (repo, tag) = reference();
    let full = format!("{repo}:{tag}");
    if crate::docker::image_exists(&full).await { Ok((repo, tag)) } else { Err(ImageError::Missing(full)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipe_hash_matches_the_setup_script() {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        let out = std::process::Command::new("bash")
            .args(["-c", &format!("source {root}/ci/lib.sh && image_tag")])
            .output()
            .expect("bash runs");
        let tag = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_eq!(tag, format!("{REPO}:{}", recipe_hash()));
    }
}
