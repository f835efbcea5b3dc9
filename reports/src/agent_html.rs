//! The agents' tables of the HTML report: what each plan concluded, its commands as decided, and its
//! scores; each interactive attempt with every call it made.

use std::fmt::Write as _;

use crate::escape::esc;
use crate::report::DrillReport;

/// With `--agent`: each plan, what it concluded, its commands as decided, and its score.
pub(crate) fn plans(o: &mut String, d: &DrillReport) {
    let plans: Vec<_> = d.remediations.iter().filter_map(|r| r.agent.as_ref()).collect();
    if plans.is_empty() {
        return;
    }
    o.push_str("<h3>Agent plans</h3>\n<table class=\"agent\">\n<thead><tr><th>#</th><th>evidence</th><th>concluded</th><th>commands</th><th>detection</th><th>localization</th><th>cause</th><th>mitigation</th></tr></thead>\n<tbody>\n");
    for (i, a) in plans.iter().enumerate() {
        let concluded = match &a.plan {
            Some(p) => format!(
                "anomaly {} · blames {} · {}",
                if p.anomaly { "yes" } else { "no" },
                esc(&p.blame.join(", ")),
                esc(&p.cause)
            ),
            None => esc(a.problem.as_deref().unwrap_or("no plan")),
        };
        let cmds: Vec<String> = a
            .commands
            .iter()
            .map(|c| {
                let mark = if !c.approved {
                    "declined"
                } else if c.exit_code == Some(0) {
                    "ran"
                } else {
                    "failed"
                };
                format!("<code>{}</code> ({mark})", esc(&c.argv.join(" ")))
            })
            .collect();
        let (det, loc, cause, mit) = match &a.score {
            Some(s) => (
                if s.detection { "right" } else { "wrong" }.to_string(),
                format!(
                    "precision {} · recall {:.2}",
                    s.precision.map_or("-".into(), |p| format!("{p:.2}")),
                    s.recall
                ),
                format!(
                    "{} ({})",
                    if s.cause { "right" } else { "wrong" },
                    esc(&s.cause_named)
                ),
                format!("{:?}", s.mitigation).to_lowercase(),
            ),
            None => ("-".into(), "-".into(), "-".into(), "-".into()),
        };
        let at = a
            .plan_at_s
            .map_or(String::new(), |t| format!(" · plan at +{t:.1} s"));
        let _ = writeln!(
            o,
            "<tr><td>{}</td><td>{}</td><td>{concluded}{at}</td><td>{}</td><td>{det}</td><td>{loc}</td><td>{cause}</td><td>{mit}</td></tr>",
            i + 1,
            a.evidence,
            if cmds.is_empty() {
                "none".to_string()
            } else {
                cmds.join("<br>")
            }
        );
    }
    o.push_str("</tbody>\n</table>\n");
}

/// With `--mcp-agent`: each attempt, what it concluded, every call it made (time, tool, what, outcome), and
/// its score; then the drill's agent summary.
pub(crate) fn attempts(o: &mut String, d: &DrillReport) {
    let attempts: Vec<_> = d.remediations.iter().filter_map(|r| r.mcp.as_ref()).collect();
    if attempts.is_empty() {
        return;
    }
    if let Some(s) = &d.agent {
        let yes = |b: bool| if b { "yes" } else { "no" };
        let _ = writeln!(
            o,
            "<h3>Interactive agent</h3>\n<p class=\"agent-summary\">detected {} · localized {} · cause {} · mitigated {} · \
             {} attempt(s) · incident to verified fix {} · {} calls · {} declined · {} refused · harmful {} · idle \
             accelerator-seconds {}</p>",
            yes(s.detected),
            yes(s.localized),
            yes(s.cause),
            yes(s.mitigated),
            s.attempts,
            s.incident_to_fix_s.map_or("-".into(), |t| format!("{t:.1} s")),
            s.tool_calls,
            s.declined,
            s.refused,
            if s.harmful.is_empty() {
                "none".to_string()
            } else {
                esc(&s.harmful.join("; "))
            },
            d.idle_accelerator_s.map_or("-".into(), |v| format!("{v:.0}"))
        );
    }
    o.push_str("<table class=\"agent-calls\">\n<thead><tr><th>attempt</th><th>at</th><th>tool</th><th>what</th><th>outcome</th><th>decided by</th></tr></thead>\n<tbody>\n");
    for a in &attempts {
        let concluded = match &a.diagnosis {
            Some(dg) => format!(
                "concluded {} · blames {}",
                esc(&dg.cause),
                esc(&dg.blame.join(", "))
            ),
            None => "no diagnosis".into(),
        };
        let score = a.score.as_ref().map_or(String::new(), |s| {
            format!(
                " · scored: cause {} · recall {:.2} · {}",
                if s.cause { "right" } else { "wrong" },
                s.recall,
                format!("{:?}", s.mitigation).to_lowercase()
            )
        });
        let _ = writeln!(
            o,
            "<tr class=\"attempt\"><td colspan=\"6\">attempt {} ({} evidence): {concluded}{score}{}</td></tr>",
            a.attempt,
            a.evidence,
            a.problem
                .as_deref()
                .map_or(String::new(), |p| format!(" · {}", esc(p)))
        );
        for c in &a.calls {
            let what = match &c.act {
                Some(x) => format!("<code>{}</code>", esc(&x.argv.join(" "))),
                None if c.arguments.as_object().is_some_and(|m| !m.is_empty()) => {
                    format!("<code>{}</code>", esc(&c.arguments.to_string()))
                }
                None => String::new(),
            };
            let outcome = serde_json::to_value(c.outcome)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default();
            let _ = writeln!(
                o,
                "<tr class=\"call-{outcome}\"><td>{}</td><td>{}</td><td>{}</td><td>{what}</td><td>{}{}</td><td>{}</td></tr>",
                a.attempt,
                c.t_s.map_or("-".into(), |t| format!("+{t:.1} s")),
                esc(&c.tool),
                esc(&outcome),
                c.message
                    .as_deref()
                    .map_or(String::new(), |m| format!(": {}", esc(m))),
                c.act.as_ref().map_or(String::new(), |x| esc(&x.decided_by)),
            );
        }
    }
    o.push_str("</tbody>\n</table>\n");
}
