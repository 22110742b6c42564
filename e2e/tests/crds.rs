//! The generated CRDs install into a real cluster and become Established.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::{Patch, PatchParams};

#[tokio::test]
async fn generated_crds_install_and_become_established() -> anyhow::Result<()> {
    let Some(client) = e2e::cluster_or_skip("generated_crds_install_and_become_established").await
    else {
        return Ok(());
    };
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let params = PatchParams::apply("koord-e2e").force();
    for crd in apis::crds::all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(&name, &params, &Patch::Apply(&crd)).await?;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let current = api.get(&name).await?;
            let established = current
                .status
                .and_then(|status| status.conditions)
                .unwrap_or_default()
                .iter()
                .any(|condition| condition.type_ == "Established" && condition.status == "True");
            if established {
                break;
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "CRD {name} not Established within 30s"
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    Ok(())
}
