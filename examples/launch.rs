//! A multi-process program: the same softmax regression as the `softmax` example, run as
//! two OS processes of one worker each on this machine through the library's launcher
//! (`launch_local`). Under BSP the weights are bit-identical to one process of two
//! workers, which the launcher checks after the copies end.
//!
//! ```sh
//! cargo run --release --example launch
//! ```

#[path = "common/softmax.rs"]
mod softmax;

use iterstore::deploy::{launch_local, Launched};
use iterstore::{Cluster, Config, Mode};

const EPOCHS: usize = 5;

fn main() -> iterstore::Result<()> {
    let weights_file = std::env::temp_dir().join(format!(
        "iterstore-launch-example-{}.txt",
        std::env::var("ITERSTORE_LAUNCH_PARENT").unwrap_or_else(|_| std::process::id().to_string())
    ));
    // The copies learn where rank 0 writes its weights from the launcher's environment.
    if std::env::var_os("ITERSTORE_LAUNCH_PARENT").is_none() {
        std::env::set_var("ITERSTORE_LAUNCH_PARENT", std::process::id().to_string());
    }
    match launch_local(2)? {
        Launched::Member(membership) => {
            let rank = membership.rank;
            let config = Config::new(1)
                .with_mode(Mode::Virtual)
                .with_membership(membership);
            let mut cluster = Cluster::start(config)?;
            let (weights, accuracy) = softmax::train(&mut cluster, EPOCHS)?;
            cluster.shutdown()?;
            if rank == 0 {
                println!("rank 0 of 2: training accuracy {:.1} %", accuracy * 100.0);
                let text: Vec<String> = weights.iter().map(|w| w.to_bits().to_string()).collect();
                std::fs::write(&weights_file, text.join(" ")).expect("write the weights");
            }
            Ok(())
        }
        Launched::Done(statuses) => {
            println!("the two processes ended: {statuses:?}");
            assert!(statuses.iter().all(|s| s.success()), "a process failed");
            let text = std::fs::read_to_string(&weights_file).expect("rank 0 wrote its weights");
            let _ = std::fs::remove_file(&weights_file);
            // One process of two workers, for comparison.
            let mut one = Cluster::start(Config::new(2).with_mode(Mode::Virtual))?;
            let (weights, _) = softmax::train(&mut one, EPOCHS)?;
            one.shutdown()?;
            let here: Vec<String> = weights.iter().map(|w| w.to_bits().to_string()).collect();
            assert_eq!(
                text,
                here.join(" "),
                "2 processes and 1 process of 2 workers differ"
            );
            println!("2 processes x 1 worker gave the same weights, bit for bit, as 1 process x 2 workers");
            Ok(())
        }
    }
}
