//! The DRA objects the receiver reads and writes: `DeviceTaintRule`s (its own per-NPU
//! isolations) and `ResourceSlice`s (which devices a node's driver publishes), both
//! `resource.k8s.io/v1`, cluster-scoped.
//!
//! As for nodes, the choice between acting and pretending is made once: the live API, or
//! a dry-run shadow that keeps the rules live mode would have created, so that a repeated
//! alert, the NPU breaker and the share of a node's NPUs decide in dry run exactly as they
//! would live. Slices are only read, so the shadow reads them from the cluster.
//!
//! Every call is bounded by `kubernetes.timeout`.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use k8s_openapi::api::resource::v1::{DeviceTaintRule, ResourceSlice};
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};

use super::isolation::{MANAGED_BY, MANAGER, NODE_LABEL};
use super::kube::{ApiError, Kube, bounded};

/// Reads and writes of per-NPU isolation.
#[async_trait]
pub(crate) trait DraApi: Send + Sync {
    /// Reads one of the rules, `None` when it does not exist.
    async fn get_rule(&self, name: &str) -> Result<Option<DeviceTaintRule>, ApiError>;
    /// The rules hcclwatch created, for one node (its [`NODE_LABEL`] value) or all.
    async fn list_rules(&self, node_label: Option<&str>) -> Result<Vec<DeviceTaintRule>, ApiError>;
    /// Creates a rule; [`ApiError::Conflict`] when one of that name exists.
    async fn create_rule(&self, rule: &DeviceTaintRule) -> Result<DeviceTaintRule, ApiError>;
    /// Deletes a rule if it still has `resource_version` ([`ApiError::Conflict`] if it
    /// changed, [`ApiError::NotFound`] if it is gone).
    async fn delete_rule(&self, name: &str, resource_version: &str) -> Result<(), ApiError>;
    /// The driver's slices for a node.
    async fn slices(&self, driver: &str, node: &str) -> Result<Vec<ResourceSlice>, ApiError>;
}

/// The DRA API for `dry_run`: the shadow, or the cluster itself.
pub(crate) fn for_mode(kube: &Kube, dry_run: bool) -> Box<dyn DraApi> {
    let live = Live {
        rules: Api::all(kube.client()),
        slices: Api::all(kube.client()),
        timeout: kube.timeout(),
    };
    if dry_run {
        Box::new(Shadow {
            live,
            rules: Mutex::new(BTreeMap::new()),
        })
    } else {
        Box::new(live)
    }
}

/// The cluster.
struct Live {
    rules: Api<DeviceTaintRule>,
    slices: Api<ResourceSlice>,
    timeout: std::time::Duration,
}

fn ours(node_label: Option<&str>) -> ListParams {
    let mut selector = format!("{MANAGED_BY}={MANAGER}");
    if let Some(n) = node_label {
        selector.push_str(&format!(",{NODE_LABEL}={n}"));
    }
    ListParams::default().labels(&selector)
}

#[async_trait]
impl DraApi for Live {
    async fn get_rule(&self, name: &str) -> Result<Option<DeviceTaintRule>, ApiError> {
        let what = format!("get DeviceTaintRule {name}");
        match bounded(self.timeout, what, self.rules.get(name)).await {
            Ok(r) => Ok(Some(r)),
            Err(ApiError::NotFound(_)) => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn list_rules(&self, node_label: Option<&str>) -> Result<Vec<DeviceTaintRule>, ApiError> {
        let what = "list hcclwatch's DeviceTaintRules".to_string();
        bounded(self.timeout, what, self.rules.list(&ours(node_label)))
            .await
            .map(|l| l.items)
    }

    async fn create_rule(&self, rule: &DeviceTaintRule) -> Result<DeviceTaintRule, ApiError> {
        let name = rule.metadata.name.clone().unwrap_or_default();
        let what = format!("create DeviceTaintRule {name}");
        bounded(
            self.timeout,
            what,
            self.rules.create(&PostParams::default(), rule),
        )
        .await
    }

    async fn delete_rule(&self, name: &str, resource_version: &str) -> Result<(), ApiError> {
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(resource_version.to_string()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        let what = format!("delete DeviceTaintRule {name}");
        bounded(self.timeout, what, self.rules.delete(name, &dp))
            .await
            .map(|_| ())
    }

    async fn slices(&self, driver: &str, node: &str) -> Result<Vec<ResourceSlice>, ApiError> {
        // Both fields are selectable on ResourceSlice, so the server filters.
        let lp =
            ListParams::default().fields(&format!("spec.driver={driver},spec.nodeName={node}"));
        let what = format!("list ResourceSlices of driver {driver} on node {node}");
        bounded(self.timeout, what, self.slices.list(&lp))
            .await
            .map(|l| l.items)
    }
}

/// Dry run: rules are kept here, slices are read from the cluster.
struct Shadow {
    live: Live,
    rules: Mutex<BTreeMap<String, DeviceTaintRule>>,
}

impl Shadow {
    fn rules(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, DeviceTaintRule>> {
        self.rules.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl DraApi for Shadow {
    async fn get_rule(&self, name: &str) -> Result<Option<DeviceTaintRule>, ApiError> {
        if let Some(r) = self.rules().get(name) {
            return Ok(Some(r.clone()));
        }
        self.live.get_rule(name).await
    }

    async fn list_rules(&self, node_label: Option<&str>) -> Result<Vec<DeviceTaintRule>, ApiError> {
        let mut all: BTreeMap<String, DeviceTaintRule> = self
            .live
            .list_rules(node_label)
            .await?
            .into_iter()
            .map(|r| (r.metadata.name.clone().unwrap_or_default(), r))
            .collect();
        for (name, r) in self.rules().iter() {
            let labels = r.metadata.labels.clone().unwrap_or_default();
            if node_label.is_none_or(|n| labels.get(NODE_LABEL).map(String::as_str) == Some(n)) {
                all.insert(name.clone(), r.clone());
            }
        }
        Ok(all.into_values().collect())
    }

    async fn create_rule(&self, rule: &DeviceTaintRule) -> Result<DeviceTaintRule, ApiError> {
        let name = rule.metadata.name.clone().unwrap_or_default();
        if self.get_rule(&name).await?.is_some() {
            return Err(ApiError::Conflict(format!(
                "create DeviceTaintRule {name}: already exists"
            )));
        }
        let mut r = rule.clone();
        r.metadata.resource_version = Some("shadow".into());
        self.rules().insert(name, r.clone());
        Ok(r)
    }

    async fn delete_rule(&self, name: &str, _resource_version: &str) -> Result<(), ApiError> {
        // A rule the shadow holds is the one dry run "created"; a live one is left alone.
        match self.rules().remove(name) {
            Some(_) => Ok(()),
            None => Err(ApiError::NotFound(format!("DeviceTaintRule {name}"))),
        }
    }

    async fn slices(&self, driver: &str, node: &str) -> Result<Vec<ResourceSlice>, ApiError> {
        self.live.slices(driver, node).await
    }
}
