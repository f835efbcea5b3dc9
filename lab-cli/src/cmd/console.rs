//! `lab console`: the lab's watcher (or, without one, the telemetry driver in this process) feeds the
//! console snapshots; the console's keys come back here as actions and go to the fault engine with each
//! fault's default parameters.

use crate::exit::Exit;
use lab_console::{Action, Feedback};
use lab_session::Lab;
use lab_session::guard::Clear;
use tokio::sync::mpsc;

pub async fn console(name: &str, read_only: bool) -> anyhow::Result<Exit> {
    let lab = Lab::open(name).await?;
    let watch = lab.follow();
    let (act_tx, act_rx) = mpsc::channel(4);
    let (fb_tx, fb_rx) = mpsc::channel(16);
    let handler = tokio::spawn(act(lab, act_rx, fb_tx));
    let options = lab_console::Options::from_env(read_only);
    let result = lab_console::run(watch.subscribe(), act_tx, fb_rx, options).await;
    drop(watch);
    // An inject or clear in flight finishes (or rolls back) before the console exits: never half a fault.
    let _ = handler.await;
    result?;
    Ok(Exit::Passed)
}

async fn act(lab: Lab, mut actions: mpsc::Receiver<Action>, feedback: mpsc::Sender<Feedback>) {
    while let Some(a) = actions.recv().await {
        let fb = match a {
            Action::Quit => break,
            Action::Inject(k) => {
                let _ = feedback
                    .send(Feedback::working(format!("injecting {k}: {} …", k.describe())))
                    .await;
                match lab.inject(k.0.default_fault()).await {
                    Ok(done) => Feedback::ok(format!(
                        "{} injected: {}",
                        done.entry.id,
                        done.changes
                            .iter()
                            .map(|c| c.line())
                            .collect::<Vec<_>>()
                            .join("; ")
                    )),
                    Err(e) => Feedback::error(format!("{k}: {e}")),
                }
            }
            Action::Clear(k) => {
                let _ = feedback.send(Feedback::working(format!("clearing {k} …"))).await;
                match lab.clear(Clear::One(k.name().to_string())).await {
                    Ok(v) if !v.is_empty() => Feedback::ok(format!("{} cleared", v[0].id)),
                    Ok(_) => Feedback::ok(format!("{k} is not injected")),
                    Err(e) => Feedback::error(format!("{k}: {e}")),
                }
            }
            Action::ClearAll => {
                let _ = feedback.send(Feedback::working("clearing every fault …")).await;
                match lab.clear(Clear::All).await {
                    Ok(v) if v.is_empty() => Feedback::ok("no fault was injected"),
                    Ok(v) => Feedback::ok(format!(
                        "cleared {}",
                        v.iter().map(|e| e.id.as_str()).collect::<Vec<_>>().join(", ")
                    )),
                    Err(e) => Feedback::error(e.to_string()),
                }
            }
        };
        let _ = feedback.send(fb).await;
    }
}
