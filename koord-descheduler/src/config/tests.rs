use super::*;

/// Upstream chart v1.8.0 `koord-descheduler-config.yaml`, with the install
/// namespace `koordinator-system` and port 10251 filled in.
const CHART_CONFIG: &str = r#"
apiVersion: descheduler/v1alpha2
kind: DeschedulerConfiguration
enableContentionProfiling: true
enableProfiling: true
healthzBindAddress: 0.0.0.0:10251
metricsBindAddress: 0.0.0.0:10251
leaderElection:
  resourceLock: leases
  resourceName: koord-descheduler
  resourceNamespace: koordinator-system
deschedulingInterval: 10s
dryRun: false
profiles:
- name: koord-descheduler
  plugins:
    deschedule:
      disabled:
        - name: "*"
    # disable LowNodeLoad by default
    # balance:
    #   enabled:
    #   - name: LowNodeLoad
    evict:
      disabled:
        - name: "*"
      enabled:
        - name: MigrationController
  pluginConfig:
  - name: MigrationController
    args:
      apiVersion: descheduler/v1alpha2
      kind: MigrationControllerArgs
      evictionPolicy: Eviction
      namespaces:
        exclude:
          - kube-system
          - koordinator-system
      evictQPS: "10"
      evictBurst: 1
  - name: LowNodeLoad
    args:
      apiVersion: descheduler/v1alpha2
      kind: LowNodeLoadArgs
      evictableNamespaces:
        exclude:
          - kube-system
          - koordinator-system
      useDeviationThresholds: false
      lowThresholds:
        cpu: 45
        memory: 55
      highThresholds:
        cpu: 75
        memory: 80
"#;

fn with_low_node_load_enabled(text: &str) -> String {
    text.replace(
        "    evict:\n      disabled:",
        "    balance:\n      enabled:\n      - name: LowNodeLoad\n    evict:\n      disabled:",
    )
}

#[test]
fn upstream_chart_configuration_loads_with_upstreams_defaults() {
    let configuration = load(CHART_CONFIG).unwrap();
    let file = &configuration.file;
    assert_eq!(
        file.descheduling_interval.to_std(),
        Some(Duration::from_secs(10))
    );
    assert_eq!(file.leader_election.leader_elect, Some(true));
    assert_eq!(
        file.leader_election.lease_duration,
        GoDuration::from_secs(15)
    );
    assert_eq!(file.client_connection.qps, 50.0);
    assert_eq!(file.client_connection.burst, 100);
    assert_eq!(file.healthz_bind_address.as_deref(), Some("0.0.0.0:10251"));
    let profile = &configuration.profiles[0];
    assert_eq!(profile.name, "koord-descheduler");
    // LowNodeLoad is configured but not enabled in the chart.
    assert!(profile.low_node_load.is_none());
    // The default filter plugin stays; the evict set was replaced.
    assert_eq!(
        profile.plugins.filter.enabled,
        vec![Plugin::named("MigrationController")]
    );
    assert_eq!(
        profile.plugins.evict.enabled,
        vec![Plugin::named("MigrationController")]
    );
    assert!(profile.plugins.deschedule.enabled.is_empty());
    let migration = &profile.migration_controller;
    assert_eq!(
        migration.evict_qps.as_ref().map(FloatOrString::float_value),
        Some(10.0)
    );
    assert_eq!(migration.max_migrating_per_node, Some(2));
    assert_eq!(migration.default_job_mode, "ReservationFirst");
    assert_eq!(migration.scheduler_names, ["koord-scheduler"]);
    assert_eq!(
        migration.object_limiters["workload"].duration,
        GoDuration::from_secs(300)
    );
    assert_eq!(
        migration.namespaces.as_ref().unwrap().exclude,
        ["kube-system", "koordinator-system"]
    );
}

#[test]
fn enabled_low_node_load_becomes_the_default_pool_with_defaults() {
    let configuration = load(&with_low_node_load_enabled(CHART_CONFIG)).unwrap();
    let low = configuration.profiles[0].low_node_load.as_ref().unwrap();
    assert!(low.node_fit);
    assert_eq!(low.node_metric_expiration_seconds, Some(180));
    assert_eq!(low.detector_cache_timeout, Duration::from_secs(300));
    assert_eq!(low.node_pools.len(), 1);
    let pool = &low.node_pools[0];
    assert_eq!(pool.name, DEFAULT_NODE_POOL_NAME);
    assert_eq!(pool.low_thresholds["cpu"], 45.0);
    assert_eq!(pool.high_thresholds["memory"], 80.0);
    assert_eq!(
        pool.resource_weights,
        [("cpu".to_string(), 1), ("memory".to_string(), 1)].into()
    );
    assert_eq!(
        pool.anomaly_condition,
        Some(AnomalyCondition {
            timeout: Duration::from_secs(60),
            consecutive_abnormalities: 5,
            consecutive_normalities: 3,
        })
    );
    // The written configuration carries the defaulted args.
    let written = serde_json::to_value(&configuration.file).unwrap();
    let args = &written["profiles"][0]["pluginConfig"][1]["args"];
    assert_eq!(args["nodeFit"], true);
    assert_eq!(args["anomalyCondition"]["consecutiveAbnormalities"], 5);
    // It loads again to the same settings.
    let again = load(&serde_json::to_string(&written).unwrap()).unwrap();
    assert_eq!(
        again.profiles[0].low_node_load,
        configuration.profiles[0].low_node_load
    );
}

/// Upstream `TestSetDefaults_LowNodeLoadArgs` and the node-pool inheritance cases.
#[test]
fn low_node_load_defaults_match_upstreams_table() {
    let mut args = LowNodeLoadArgs {
        low_thresholds: Some(
            [
                ("cpu".into(), 30.0),
                ("memory".into(), 30.0),
                ("pods".into(), 10.0),
            ]
            .into(),
        ),
        resource_weights: Some([("cpu".into(), 10), ("memory".into(), 5)].into()),
        ..Default::default()
    };
    defaults::set_low_node_load_defaults(&mut args);
    assert_eq!(
        args.resource_weights.unwrap(),
        [
            ("cpu".to_string(), 10),
            ("memory".to_string(), 5),
            ("pods".to_string(), 1)
        ]
        .into()
    );

    // Only the first zero count is filled (upstream's else-if).
    let mut args = LowNodeLoadArgs {
        anomaly_condition: Some(LoadAnomalyCondition {
            timeout: Some(GoDuration::from_secs(10)),
            consecutive_abnormalities: 0,
            consecutive_normalities: 0,
        }),
        ..Default::default()
    };
    defaults::set_low_node_load_defaults(&mut args);
    let condition = args.anomaly_condition.unwrap();
    assert_eq!(
        (
            condition.consecutive_abnormalities,
            condition.consecutive_normalities
        ),
        (5, 0)
    );

    let mut args = LowNodeLoadArgs {
        high_thresholds: Some([("cpu".into(), 80.0)].into()),
        low_thresholds: Some([("cpu".into(), 20.0)].into()),
        anomaly_condition: Some(LoadAnomalyCondition {
            timeout: Some(GoDuration::from_secs(120)),
            consecutive_abnormalities: 10,
            consecutive_normalities: 5,
        }),
        node_pools: vec![
            LowNodeLoadNodePool {
                name: "pool-1".into(),
                ..Default::default()
            },
            LowNodeLoadNodePool {
                name: "pool-2".into(),
                high_thresholds: Some([("cpu".into(), 70.0)].into()),
                anomaly_condition: Some(LoadAnomalyCondition {
                    timeout: Some(GoDuration::from_secs(60)),
                    consecutive_abnormalities: 0,
                    consecutive_normalities: 0,
                }),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    defaults::set_low_node_load_defaults(&mut args);
    let pools = &args.node_pools;
    assert_eq!(
        pools[0].high_thresholds,
        Some([("cpu".into(), 80.0)].into())
    );
    assert_eq!(pools[0].low_thresholds, Some([("cpu".into(), 20.0)].into()));
    assert_eq!(pools[0].anomaly_condition, args.anomaly_condition);
    assert_eq!(
        pools[1].high_thresholds,
        Some([("cpu".into(), 70.0)].into())
    );
    let inherited = pools[1].anomaly_condition.clone().unwrap();
    assert_eq!(inherited.timeout, Some(GoDuration::from_secs(60)));
    assert_eq!(
        (
            inherited.consecutive_abnormalities,
            inherited.consecutive_normalities
        ),
        (10, 5)
    );
    assert_eq!(
        pools[1].resource_weights,
        Some([("cpu".to_string(), 1), ("memory".to_string(), 1)].into())
    );
}

fn low_node_load_config(args: &str) -> String {
    format!(
        "apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\nprofiles:\n- name: p\n  plugins:\n    balance:\n      enabled:\n      - name: LowNodeLoad\n  pluginConfig:\n  - name: LowNodeLoad\n    args:\n{args}"
    )
}

fn invalid(text: &str) -> Vec<String> {
    match load(text) {
        Err(ConfigError::Invalid(errors)) => errors,
        other => panic!("expected validation errors, got {other:?}"),
    }
}

/// Upstream `TestValidateLowLoadUtilizationArgs*` cases.
#[test]
fn low_node_load_validation_matches_upstreams_table() {
    for (high, low, ok) in [
        (100.0, 90.0, true),
        (0.0, 0.0, true),
        (0.0, -1.0, false),
        (100.0, -10.0, false),
        (-10.0, -100.0, false),
        // Upstream does not bound thresholds above 100.
        (120.0, 50.0, true),
        (120.0, 120.0, true),
        (50.0, 60.0, false),
    ] {
        let text = low_node_load_config(&format!(
            "      highThresholds: {{cpu: {high}}}\n      lowThresholds: {{cpu: {low}}}\n"
        ));
        assert_eq!(
            load(&text).is_ok(),
            ok,
            "high {high} low {low}: {:?}",
            load(&text).err()
        );
    }
    for (number, ok) in [(10, true), (0, true), (-1, false)] {
        let text = low_node_load_config(&format!("      numberOfNodes: {number}\n"));
        assert_eq!(load(&text).is_ok(), ok, "numberOfNodes {number}");
    }
    let errors = invalid(&low_node_load_config(
        "      nodeMetricExpirationSeconds: 0\n",
    ));
    assert!(
        errors[0].contains("should be a positive value"),
        "{errors:?}"
    );
    let errors = invalid(&low_node_load_config(
        "      evictableNamespaces: {include: [a], exclude: [b]}\n",
    ));
    assert!(
        errors[0].contains("only one of Include/Exclude"),
        "{errors:?}"
    );
    let errors = invalid(&low_node_load_config(
        "      nodePools:\n      - name: x\n        nodeSelector: {matchExpressions: [{key: a, operator: Bad}]}\n",
    ));
    assert!(
        errors[0].contains("nodePools[1].nodeSelector"),
        "{errors:?}"
    );
    // Thresholds must be numbers a percentage can be.
    let err = load(&low_node_load_config("      highThresholds: {cpu: .inf}\n")).unwrap_err();
    assert!(err.to_string().contains("non-finite"), "{err}");
    // A condition whose normal count upstream's defaulting leaves at 0 is refused, as upstream.
    let errors = invalid(&low_node_load_config(
        "      anomalyCondition: {timeout: 10s}\n",
    ));
    assert!(
        errors[0].contains("consecutiveNormalities must be greater than 0"),
        "{errors:?}"
    );
}

#[test]
fn migration_controller_validation() {
    let config = |args: &str| {
        format!(
            "apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\nprofiles:\n- name: p\n  pluginConfig:\n  - name: MigrationController\n    args:\n{args}"
        )
    };
    assert!(load(&config("      evictQPS: 0.5\n")).is_ok());
    for (args, message) in [
        ("      evictQPS: \"0\"\n", "evictQPS must be greater than 0"),
        ("      evictBurst: 0\n", "evictBurst must be greater than 0"),
        (
            "      maxMigratingPerNode: -1\n",
            "maxMigratingPerNode should be greater or equal 0",
        ),
        (
            "      maxMigratingPerWorkload: \"ten\"\n",
            "maxMigratingPerWorkload is invalid",
        ),
        (
            "      defaultJobMode: Later\n",
            "defaultJobMode must be ReservationFirst or EvictDirectly",
        ),
        ("      skipEvictionGates: [Nope]\n", "unknown eviction gate"),
        (
            "      maxConcurrentReconciles: 0\n",
            "maxConcurrentReconciles should be greater than or equal to 1",
        ),
        (
            "      priorityThreshold: {value: 2000000001}\n",
            "can't be greater than 2000000000",
        ),
    ] {
        let errors = invalid(&config(args));
        assert!(
            errors.iter().any(|e| e.contains(message)),
            "{args}: {errors:?}"
        );
    }
}

#[test]
fn bad_input_gets_a_clear_error() {
    let base = "apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\n";
    assert!(matches!(
        load("apiVersion: descheduler/v1alpha1\nkind: DeschedulerConfiguration\n"),
        Err(ConfigError::ApiVersion { .. })
    ));
    assert!(matches!(
        load("apiVersion: descheduler/v1alpha2\nkind: Other\n"),
        Err(ConfigError::Kind { .. })
    ));
    // Strict: unknown and repeated fields are errors.
    let err = load(&format!("{base}unknownField: 1\n")).unwrap_err();
    assert!(err.to_string().contains("unknownField"), "{err}");
    let err = load(&format!("{base}dryRun: true\ndryRun: false\n")).unwrap_err();
    assert!(matches!(err, ConfigError::Decode(_)), "{err}");
    let err = load(&format!(
        "{base}profiles:\n- name: p\n  pluginConfig:\n  - name: LowNodeLoad\n    args: {{lowThreshold: {{cpu: 1}}}}\n"
    ))
    .unwrap_err();
    assert!(err.to_string().contains("pluginConfig[0]"), "{err}");
    assert!(err.to_string().contains("lowThreshold"), "{err}");
    let err = load(&format!(
        "{base}profiles:\n- name: p\n  pluginConfig:\n  - name: LowNodeLoad\n    args: {{kind: MigrationControllerArgs}}\n"
    ))
    .unwrap_err();
    assert!(err.to_string().contains("not \"LowNodeLoadArgs\""), "{err}");
    let errors = invalid(&format!("{base}profiles:\n- name: a\n- name: a\n"));
    assert!(errors[0].contains("Duplicate"), "{errors:?}");
    let errors = invalid(&format!("{base}profiles:\n- name: a\n- {{}}\n"));
    assert!(
        errors[0].contains("profiles[1].name: Required value"),
        "{errors:?}"
    );
    let errors = invalid(&format!("{base}healthzBindAddress: \"nonsense\"\n"));
    assert!(errors[0].contains("healthzBindAddress"), "{errors:?}");
    let errors = invalid(&format!(
        "{base}leaderElection: {{leaseDuration: 5s, renewDeadline: 10s}}\n"
    ));
    assert!(
        errors[0].contains("LeaseDuration must be greater than RenewDeadline"),
        "{errors:?}"
    );
    // Alias bombs and deep nesting hit the budget, not the memory.
    let bomb = format!(
        "{base}a: &a [x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b]\nd: [*c,*c,*c,*c,*c,*c,*c,*c]\n"
    );
    assert!(load(&bomb).is_err());
    let deep = format!("{base}profiles: {}{}", "[".repeat(200), "]".repeat(200));
    assert!(load(&deep).is_err());
}

#[test]
fn bind_addresses_get_upstreams_defaults() {
    let base = "apiVersion: descheduler/v1alpha2\nkind: DeschedulerConfiguration\n";
    let configuration = load(base).unwrap();
    assert_eq!(
        configuration.file.healthz_bind_address.as_deref(),
        Some("0.0.0.0:10251")
    );
    let configuration = load(&format!(
        "{base}healthzBindAddress: \":9999\"\nmetricsBindAddress: \"127.0.0.1\"\n"
    ))
    .unwrap();
    assert_eq!(
        configuration.file.healthz_bind_address.as_deref(),
        Some("0.0.0.0:9999")
    );
    assert_eq!(
        configuration.file.metrics_bind_address.as_deref(),
        Some("127.0.0.1:10251")
    );
    // Without a file: one profile with MigrationController as evictor and filter.
    let defaults = from_file(default_configuration()).unwrap();
    assert_eq!(defaults.profiles.len(), 1);
    assert_eq!(
        defaults.profiles[0].enabled_plugins(),
        ["MigrationController"]
    );
    assert_eq!(
        defaults.file.profiles[0].plugin_config[0].name,
        "MigrationController"
    );
}

#[test]
fn empty_values_read_as_empty() {
    // `exclude:` left empty in the file and in a plugin's args: no namespace
    // excluded, as Kubernetes reads it.
    let text = CHART_CONFIG.replace(
        "        exclude:\n          - kube-system\n          - koordinator-system\n      evictQPS",
        "        exclude:\n      evictQPS",
    );
    assert_ne!(text, CHART_CONFIG);
    let configuration = load(&text).unwrap();
    assert_eq!(configuration.file.profiles.len(), 1);
    let args = configuration.file.profiles[0]
        .plugin_config
        .iter()
        .find(|config| config.name == "MigrationController")
        .and_then(|config| config.args.as_ref())
        .unwrap();
    assert!(args["namespaces"]["exclude"].is_null());
}
