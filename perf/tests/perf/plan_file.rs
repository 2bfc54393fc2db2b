//! The plan file round-trips and is rejected, by field, when it is not a plan.

use iterstore_perf::{builtin, search, Cluster, Model, Plan};

#[test]
fn a_plan_round_trips_and_an_unknown_field_is_named() {
    let cluster = Cluster {
        machines: 6,
        cores: 4,
    };
    let model = Model::new(
        &builtin::cnn(),
        &builtin::example_profile(),
        &builtin::fashion_mnist_training(),
    );
    let found = search(&model, &cluster).unwrap();
    let plan = Plan::new(
        "fashion-mnist-cnn",
        "example",
        cluster,
        builtin::fashion_mnist_training(),
        found.best(),
    );
    let dir = std::env::temp_dir().join(format!("iterstore-perf-plan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("plan.json");
    std::fs::write(&path, plan.to_json()).unwrap();
    let back = Plan::load(&path).unwrap();
    assert_eq!(
        (&back.layers, back.resources, back.cluster),
        (&plan.layers, plan.resources, plan.cluster)
    );
    assert!((back.estimate.epoch_s - plan.estimate.epoch_s).abs() <= 1e-12 * plan.estimate.epoch_s);
    assert_eq!(plan.layers.len(), 6);

    let bad = plan
        .to_json()
        .replacen("\"partitions\"", "\"partitons\"", 1);
    std::fs::write(&path, bad).unwrap();
    let err = Plan::load(&path).unwrap_err().to_string();
    assert!(
        err.contains("partitons") && err.contains("plan.json"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
