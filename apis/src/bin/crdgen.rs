//! Writes one YAML file per CRD into the given directory:
//! `cargo run -p apis --bin crdgen -- charts/koordinator/crds`.
//! Stale generated files (ones carrying our header that no CRD produces any
//! more) are removed; other files are left alone.

use std::path::PathBuf;

use anyhow::{Context, bail};

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args_os().skip(1);
    let (Some(dir), None) = (args.next(), args.next()) else {
        bail!("usage: crdgen <output-dir>");
    };
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;

    let rendered = apis::crds::render_all().context("rendering CRDs as YAML")?;
    for crd in &rendered {
        let path = dir.join(&crd.file_name);
        std::fs::write(&path, &crd.yaml).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }

    for entry in std::fs::read_dir(&dir).with_context(|| format!("listing {}", dir.display()))? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|name| name.to_str()) else {
            continue;
        };
        let ours = rendered.iter().any(|crd| crd.file_name == name);
        if ours || !name.ends_with(".yaml") {
            continue;
        }
        let content = std::fs::read_to_string(&path).unwrap_or_default();
        if content.starts_with(apis::crds::GENERATED_HEADER) {
            std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            println!("removed stale {}", path.display());
        }
    }
    Ok(())
}
