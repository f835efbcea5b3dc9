//! Draws one whole screen from the [`State`] at a given time: the headline, Kubernetes' view beside the
//! job's own view, per-server storage latency, the alerts, the change records and the status line.
//!
//! Nothing here reads a clock or a terminal; `render` draws into any ratatui frame, so whole screens are
//! tested on a `TestBackend`.

use lab_model::Snapshot;
use lab_model::format::latency;
use lab_model::snapshot::GoldenSignal;
use lab_model::status::Phase;
use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Clear, Paragraph, Row, Sparkline, Table, Wrap};

use crate::action::FaultKey;
use crate::state::State;
use crate::summary::{
    Tone, fmt_opt_latency, fmt_pct, fmt_share, fmt_span, headline, split_bar, text_sparkline,
};

/// A snapshot older than this is shown as stale.
pub const STALE_MS: u64 = 5_000;

const KEYS: &str = "s/t/u inject · S/T/U clear · c clear all · ? help · q quit";
/// The key line of a read-only console (`lab console --read-only`).
const KEYS_READ_ONLY: &str = "read-only: keys change nothing · ? help · q quit";

/// Takes every colour off a drawn screen (`NO_COLOR`), keeping what it meant as emphasis: what was red
/// (bad) is bold, what was yellow (a warning) is underlined; the screen's own marks (▲, *) stay.
fn strip_colour(buf: &mut ratatui::buffer::Buffer) {
    for cell in &mut buf.content {
        match cell.fg {
            Color::Red | Color::LightRed => cell.modifier.insert(Modifier::BOLD),
            Color::Yellow | Color::LightYellow => cell.modifier.insert(Modifier::UNDERLINED),
            _ => {}
        }
        cell.fg = Color::Reset;
        cell.bg = Color::Reset;
    }
}

fn tone_style(t: Tone) -> Style {
    match t {
        Tone::Good => Style::new().fg(Color::Green),
        Tone::Warn => Style::new().fg(Color::Yellow),
        Tone::Bad => Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        Tone::Plain => Style::new(),
    }
}

fn heading() -> Style {
    Style::new().add_modifier(Modifier::BOLD).fg(Color::Cyan)
}

/// Draws the whole console at `now_ms`.
pub fn render(frame: &mut Frame, state: &State, now_ms: u64) {
    render_screen(frame, state, now_ms);
    if !state.options.colour {
        strip_colour(frame.buffer_mut());
    }
}

fn render_screen(frame: &mut Frame, state: &State, now_ms: u64) {
    let [head, body, status] =
        Layout::vertical([Constraint::Length(2), Constraint::Min(0), Constraint::Length(1)])
            .areas(frame.area());
    render_status_line(frame, status, state, now_ms);
    let Some(snap) = &state.snapshot else {
        frame.render_widget(Paragraph::new("Straggler Lab").bold(), head);
        let text = if state.source_closed {
            "the lab's telemetry stopped: is the lab still up? (`lab status`)"
        } else {
            "waiting for the first snapshot from the lab…"
        };
        frame.render_widget(Paragraph::new(text).alignment(Alignment::Center), body);
        if state.help {
            render_help(frame, state.options.read_only);
        }
        return;
    };
    render_head(frame, head, snap, state, now_ms);
    let changes_height = (snap.changes.len().min(5) + usize::from(!snap.faults.is_empty()) + 2).max(3) as u16;
    let [top, middle, bottom] = Layout::vertical([
        Constraint::Fill(3),
        Constraint::Fill(2),
        Constraint::Length(changes_height),
    ])
    .areas(body);
    let [kube, training] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(top);
    let [storage, alerts] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(middle);
    render_kubernetes(frame, kube, snap);
    render_training(frame, training, snap);
    render_storage(frame, storage, snap);
    render_alerts(frame, alerts, snap, now_ms);
    render_changes(frame, bottom, snap, now_ms);
    if state.help {
        render_help(frame, state.options.read_only);
    }
}

fn render_head(frame: &mut Frame, area: Rect, snap: &Snapshot, state: &State, now_ms: u64) {
    let mut spans = Vec::new();
    for (i, seg) in headline(snap).into_iter().enumerate() {
        if i > 0 {
            spans.push(Span::raw(" · "));
        }
        spans.push(Span::styled(seg.text, tone_style(seg.tone)));
    }
    let age = now_ms.saturating_sub(snap.at_ms);
    let mut sub = vec![Span::raw(format!(
        "lab {} · {} runtime · ",
        snap.status.lab, snap.status.runtime
    ))];
    if state.source_closed {
        sub.push(Span::styled("telemetry stopped", tone_style(Tone::Bad)));
    } else if age > STALE_MS {
        sub.push(Span::styled(
            format!("data {} old", fmt_span(age)),
            tone_style(Tone::Bad),
        ));
    } else {
        sub.push(Span::raw(format!("data {:.1} s old", age as f64 / 1000.0)));
    }
    if !snap.scrape_errors.is_empty() {
        let n = snap.scrape_errors.len();
        sub.push(Span::styled(
            format!(
                " · {n} scrape error{}: {}",
                if n == 1 { "" } else { "s" },
                snap.scrape_errors[0]
            ),
            tone_style(Tone::Warn),
        ));
    }
    let lines = vec![Line::from(spans).bold(), Line::from(sub).dim()];
    frame.render_widget(Paragraph::new(lines), area);
}

fn render_kubernetes(frame: &mut Frame, area: Rect, snap: &Snapshot) {
    let st = &snap.status;
    let (ranks_ready, ranks) = st.ranks_ready();
    let (servers_ready, servers) = st.servers_ready();
    let gpus_used: u32 = st
        .pods
        .iter()
        .filter(|p| p.phase == Phase::Running)
        .map(|p| p.resources.gpus)
        .sum();
    let title = format!(
        " Kubernetes · ranks {ranks_ready}/{ranks} Ready · storage {servers_ready}/{servers} Ready · GPUs {gpus_used}/{} ",
        st.gpus_capacity
    );
    // A node column only where the pods span several nodes (a multi-node kind cluster).
    let nodes: std::collections::BTreeSet<&str> = st.pods.iter().filter_map(|p| p.node.as_deref()).collect();
    let node_width = if nodes.len() > 1 {
        nodes.iter().map(|n| n.len()).max().unwrap_or(4).clamp(4, 24) as u16
    } else {
        0
    };
    let rows = st.pods.iter().map(|p| {
        let r = &p.resources;
        let cpu = r.cpu_live_spec();
        let cpu = if r.drifted() { format!("{cpu}*") } else { cpu };
        let phase_style = match p.phase {
            Phase::Running | Phase::Succeeded => Style::new(),
            Phase::Pending => tone_style(Tone::Warn),
            Phase::Failed => tone_style(Tone::Bad),
        };
        let ready = if p.ready {
            Span::styled("1/1", tone_style(Tone::Good))
        } else {
            Span::raw("0/1")
        };
        let mut cells = vec![Cell::from(p.name.clone())];
        if node_width > 0 {
            cells.push(Cell::from(p.node.clone().unwrap_or_else(|| "-".into())));
        }
        cells.extend([
            Cell::from(Span::styled(p.phase.to_string(), phase_style)),
            Cell::from(ready),
            Cell::from(p.restarts.to_string()),
            Cell::from(Span::styled(
                cpu,
                if r.drifted() {
                    tone_style(Tone::Warn)
                } else {
                    Style::new()
                },
            )),
            Cell::from(if r.gpus > 0 {
                r.gpus.to_string()
            } else {
                "-".to_string()
            }),
            Cell::from(p.reason.clone().unwrap_or_default()),
        ]);
        Row::new(cells)
    });
    let mut names = vec!["NAME"];
    let mut widths = vec![Constraint::Length(14)];
    if node_width > 0 {
        names.push("NODE");
        widths.push(Constraint::Length(node_width));
    }
    names.extend(["PHASE", "READY", "RESTARTS", "CPU live/spec", "GPU", "REASON"]);
    widths.extend([
        Constraint::Length(7),
        Constraint::Length(5),
        Constraint::Length(8),
        Constraint::Length(13),
        Constraint::Length(3),
        Constraint::Min(6),
    ]);
    let header = Row::new(names).style(heading());
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::bordered().title(title));
    frame.render_widget(table, area);
    if snap.status.pods.iter().any(|p| p.resources.drifted()) && area.height > 2 {
        let note = Rect {
            x: area.x + 2,
            y: area.y + area.height - 1,
            width: area.width.saturating_sub(4),
            height: 1,
        };
        frame.render_widget(
            Paragraph::new(" * live limit differs from the template ").dim(),
            note,
        );
    }
}

fn render_training(frame: &mut Frame, area: Rect, snap: &Snapshot) {
    let t = &snap.training;
    let block = Block::bordered().title(" Training · the job's own signals ");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [figures, spark, ranks] =
        Layout::vertical([Constraint::Length(2), Constraint::Length(3), Constraint::Min(0)]).areas(inner);

    let mut throughput = vec![Span::raw("throughput ")];
    match (t.samples_per_s, t.baseline) {
        (Some(v), Some(b)) => {
            let pct = t.pct_of_baseline.unwrap_or(0.0);
            throughput.push(Span::styled(
                format!("{}% of normal", fmt_pct(pct)),
                tone_style(if pct < 50.0 { Tone::Bad } else { Tone::Good }),
            ));
            throughput.push(Span::raw(format!(
                " · {v:.0} samples/s, baseline {:.0}",
                b.samples_per_s
            )));
        }
        (Some(v), None) => throughput.push(Span::raw(format!("{v:.0} samples/s · learning its baseline"))),
        _ => throughput.push(Span::raw("-")),
    }
    let mut step = vec![Span::raw("step time ")];
    step.push(Span::raw(t.step_seconds.map_or("-".to_string(), latency)));
    if let Some(b) = t.baseline.filter(|b| b.step_seconds > 0.0) {
        step.push(Span::raw(format!(" (baseline {})", latency(b.step_seconds))));
    }
    step.push(Span::raw(format!(" · step {}", t.step)));
    if let Some(w) = t.world_size {
        step.push(Span::raw(format!(" · world size {w}")));
    }
    if t.steps_lost > 0 {
        step.push(Span::styled(
            format!(" · {} steps lost", t.steps_lost),
            tone_style(Tone::Warn),
        ));
    }
    frame.render_widget(
        Paragraph::new(vec![Line::from(throughput), Line::from(step)]),
        figures,
    );

    let max = t
        .history
        .iter()
        .copied()
        .fold(t.baseline.map_or(0.0, |b| b.samples_per_s), f64::max);
    let width = usize::from(spark.width);
    let data: Vec<u64> = t.history[t.history.len().saturating_sub(width)..]
        .iter()
        .map(|v| v.max(0.0) as u64)
        .collect();
    frame.render_widget(
        Sparkline::default()
            .data(&data)
            .max(max.max(1.0) as u64)
            .style(Style::new().fg(Color::Green)),
        spark,
    );

    let rows = snap.ranks.iter().map(|r| {
        let state = if !r.up {
            Span::styled(crate::summary::rank_absent(snap, &r.name), tone_style(Tone::Warn))
        } else if r.waiting_for_peers {
            Span::styled("waiting for peers", tone_style(Tone::Bad))
        } else if r.throttled.is_some_and(|v| v > 0.25) {
            Span::raw(format!("throttled {}", fmt_share(r.throttled)))
        } else {
            Span::raw("")
        };
        Row::new(vec![
            Cell::from(r.name.clone()),
            Cell::from(r.server.clone().unwrap_or_else(|| "-".into())),
            Cell::from(split_bar(r.read, r.compute, r.wait, r.transfer, 10)),
            Cell::from(fmt_share(r.read)),
            Cell::from(fmt_share(r.compute.map(|c| c + r.transfer.unwrap_or(0.0)))),
            Cell::from(fmt_share(r.wait)),
            Cell::from(fmt_opt_latency(r.read_p50)),
            Cell::from(state),
        ])
    });
    let header = Row::new([
        "RANK",
        "READS FROM",
        "SPLIT",
        "READ",
        "COMP",
        "WAIT",
        "READ p50",
        "STATE",
    ])
    .style(heading());
    let table = Table::new(
        rows,
        [
            Constraint::Length(7),
            Constraint::Length(10),
            Constraint::Length(10),
            Constraint::Length(4),
            Constraint::Length(4),
            Constraint::Length(4),
            Constraint::Length(8),
            Constraint::Min(8),
        ],
    )
    .header(header);
    frame.render_widget(table, ranks);
}

fn render_storage(frame: &mut Frame, area: Rect, snap: &Snapshot) {
    let max = snap
        .storage
        .iter()
        .flat_map(|s| s.history.iter().copied())
        .fold(0.0, f64::max);
    let rows = snap.storage.iter().map(|s| {
        let style = if s.outlier {
            tone_style(Tone::Bad)
        } else {
            Style::new()
        };
        let name = if s.outlier {
            format!("{} ▲", s.name)
        } else {
            s.name.clone()
        };
        Row::new(vec![
            Cell::from(name),
            Cell::from(fmt_opt_latency(s.client_p50)),
            Cell::from(fmt_opt_latency(s.client_p99)),
            Cell::from(fmt_opt_latency(s.server_p50)),
            Cell::from(fmt_opt_latency(s.baseline_p50)),
            Cell::from(text_sparkline(&s.history, max, 14)),
            Cell::from(s.readers.join(",")),
        ])
        .style(style)
    });
    let header = Row::new([
        "SERVER",
        "p50",
        "p99",
        "OWN p50",
        "BASELINE",
        "p50 HISTORY",
        "READERS",
    ])
    .style(heading());
    let table = Table::new(
        rows,
        [
            Constraint::Length(11),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(7),
            Constraint::Length(8),
            Constraint::Length(14),
            Constraint::Min(6),
        ],
    )
    .header(header)
    .block(
        Block::bordered().title(" Storage · read latency as the ranks see it; OWN: as SeaweedFS reports "),
    );
    frame.render_widget(table, area);
}

fn signal_style(s: GoldenSignal) -> Style {
    match s {
        GoldenSignal::Latency | GoldenSignal::Throughput => tone_style(Tone::Bad),
        GoldenSignal::Errors | GoldenSignal::Saturation => tone_style(Tone::Warn),
    }
}

fn render_alerts(frame: &mut Frame, area: Rect, snap: &Snapshot, now_ms: u64) {
    let title = format!(" Alerts · golden signals firing: {} ", snap.alerts.len());
    let block = Block::bordered().title(title);
    if snap.alerts.is_empty() {
        frame.render_widget(
            Paragraph::new(Span::styled("no golden signal fires", tone_style(Tone::Good))).block(block),
            area,
        );
        return;
    }
    let mut alerts: Vec<_> = snap.alerts.iter().collect();
    alerts.sort_by_key(|a| (a.since_ms, a.rule.clone(), a.target.clone()));
    let rows = alerts.into_iter().map(|a| {
        Row::new(vec![
            Cell::from(Span::styled(a.signal.to_string(), signal_style(a.signal))),
            Cell::from(format!("for {}", fmt_span(now_ms.saturating_sub(a.since_ms)))),
            Cell::from(a.summary.clone()),
        ])
    });
    let header = Row::new(["SIGNAL", "FIRING", "WHAT"]).style(heading());
    let table = Table::new(
        rows,
        [Constraint::Length(10), Constraint::Length(9), Constraint::Min(10)],
    )
    .header(header)
    .block(block);
    frame.render_widget(table, area);
}

fn render_changes(frame: &mut Frame, area: Rect, snap: &Snapshot, now_ms: u64) {
    let mut lines = Vec::new();
    if !snap.faults.is_empty() {
        let active: Vec<String> = snap
            .faults
            .iter()
            .map(|f| format!("{} on {} ({})", f.kind, f.target, f.phase))
            .collect();
        lines.push(Line::from(vec![
            Span::styled("active faults: ", tone_style(Tone::Warn)),
            Span::raw(active.join(", ")),
        ]));
    }
    let mut changes: Vec<_> = snap.changes.iter().collect();
    changes.sort_by_key(|c| std::cmp::Reverse(c.at_ms));
    for c in changes.into_iter().take(5) {
        let source = match c.source {
            lab_model::change::ChangeSource::Fault => "fault",
            lab_model::change::ChangeSource::Remediation => "remediation",
            lab_model::change::ChangeSource::Lifecycle => "lifecycle",
        };
        lines.push(Line::from(vec![
            Span::raw(format!("{:>7} ago  ", fmt_span(now_ms.saturating_sub(c.at_ms)))).dim(),
            Span::raw(format!("{source:<11} ")),
            Span::raw(c.line()),
        ]));
    }
    if lines.is_empty() {
        lines.push(Line::from("no changes recorded").dim());
    }
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" Changes · faults injected and cleared ")),
        area,
    );
}

fn render_status_line(frame: &mut Frame, area: Rect, state: &State, now_ms: u64) {
    let keys = if state.options.read_only {
        KEYS_READ_ONLY
    } else {
        KEYS
    };
    let line = match state.status_line(now_ms) {
        Some(s) => {
            let style = if s.pending {
                tone_style(Tone::Warn)
            } else if s.ok {
                tone_style(Tone::Good)
            } else {
                tone_style(Tone::Bad)
            };
            Line::from(vec![
                Span::styled(s.text.clone(), style),
                Span::raw("  ·  "),
                Span::raw(keys).dim(),
            ])
        }
        None => Line::from(Span::raw(keys).dim()),
    };
    frame.render_widget(Paragraph::new(line), area);
}

fn render_help(frame: &mut Frame, read_only: bool) {
    let area = frame.area();
    let width = area.width.min(72);
    let height = area.height.min(15);
    let popup = Rect {
        x: area.x + (area.width - width) / 2,
        y: area.y + (area.height - height) / 2,
        width,
        height,
    };
    let mut lines = vec![
        Line::from(if read_only {
            "Read-only console (--read-only): no key injects or clears a fault."
        } else {
            "Inject a fault with its key; clear it with the upper-case key."
        })
        .bold(),
        Line::from(""),
    ];
    for f in FaultKey::all().filter(|_| !read_only) {
        lines.push(Line::from(vec![
            Span::styled(
                format!("  {} / {}  ", f.key(), f.key().to_ascii_uppercase()),
                heading(),
            ),
            Span::raw(format!("{:<17}", f.name())),
            Span::raw(f.describe()).dim(),
        ]));
    }
    if !read_only {
        lines.push(Line::from(vec![
            Span::styled("  c      ", heading()),
            Span::raw("clear every active fault"),
        ]));
    }
    lines.extend([
        Line::from(vec![
            Span::styled("  ?      ", heading()),
            Span::raw("show or hide this help"),
        ]),
        Line::from(vec![
            Span::styled("  q Esc  ", heading()),
            Span::raw("quit (Ctrl-C too)"),
        ]),
        Line::from(""),
        Line::from("Ready says the process is up; the job's own throughput says whether it trains.").dim(),
        Line::from("Split: ▒ read  █ compute  ░ waiting at the collective.").dim(),
    ]);
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: false })
            .block(Block::bordered().title(" Help ")),
        popup,
    );
}

#[cfg(test)]
mod tests {
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;
    use ratatui::buffer::Buffer;

    use super::*;
    use crate::action::Feedback;
    use crate::fixtures::{self, NOW};

    fn screen(
        snapshot: Option<lab_model::Snapshot>,
        width: u16,
        height: u16,
        edit: impl FnOnce(&mut State),
    ) -> Terminal<TestBackend> {
        let mut state = State::new();
        if let Some(s) = snapshot {
            state.apply(s, NOW);
        }
        edit(&mut state);
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal.draw(|f| render(f, &state, NOW)).unwrap();
        terminal
    }

    fn text(buf: &Buffer) -> String {
        let mut s = String::new();
        for y in 0..buf.area.height {
            for x in 0..buf.area.width {
                s.push_str(buf[(x, y)].symbol());
            }
            s.push('\n');
        }
        s
    }

    #[test]
    fn pods_on_two_nodes_get_a_node_column() {
        let one = text(
            screen(Some(fixtures::healthy()), 150, 34, |_| {})
                .backend()
                .buffer(),
        );
        assert!(!one.contains("NODE"), "{one}");
        let mut snap = fixtures::healthy();
        for (i, p) in snap.status.pods.iter_mut().enumerate() {
            p.node = Some(
                if i % 2 == 0 {
                    "lab-e2e-control-plane"
                } else {
                    "lab-e2e-worker"
                }
                .into(),
            );
        }
        let two = text(screen(Some(snap), 150, 34, |_| {}).backend().buffer());
        assert!(two.contains("NODE"), "{two}");
        assert!(two.contains("lab-e2e-worker"), "{two}");
    }

    #[test]
    fn baseline_screen() {
        insta::assert_snapshot!(screen(Some(fixtures::healthy()), 150, 34, |_| {}).backend());
    }

    #[test]
    fn slow_storage_screen() {
        let t = screen(Some(fixtures::slow_storage()), 150, 34, |_| {});
        let first = text(t.backend().buffer())
            .lines()
            .next()
            .unwrap()
            .trim_end()
            .to_string();
        assert_eq!(
            first,
            "Kubernetes: 4/4 Ready · Training: 7% of normal · storage-1 read p50 488 ms (siblings 3.0 ms)"
        );
        insta::assert_snapshot!(t.backend());
    }

    #[test]
    fn throttled_rank_screen() {
        insta::assert_snapshot!(screen(Some(fixtures::throttled_rank()), 150, 34, |_| {}).backend());
    }

    #[test]
    fn unplaceable_rank_screen() {
        insta::assert_snapshot!(screen(Some(fixtures::unplaceable_rank()), 150, 34, |_| {}).backend());
    }

    #[test]
    fn sixteen_ranks_and_eight_servers_fit() {
        let t = screen(Some(fixtures::healthy_sized(16, 8)), 170, 56, |_| {});
        let s = text(t.backend().buffer());
        for name in ["rank-15", "storage-7"] {
            assert!(s.matches(name).count() >= 2, "{name} missing:\n{s}");
        }
        insta::assert_snapshot!(t.backend());
    }

    #[test]
    fn help_overlay_and_feedback() {
        let t = screen(Some(fixtures::healthy()), 150, 34, |s| {
            s.help = true;
            s.on_feedback(
                Feedback::ok("slow-storage injected: storage-1 +300 ms via latency proxy"),
                NOW,
            );
        });
        insta::assert_snapshot!(t.backend());
    }

    #[test]
    fn waiting_and_stale_and_tiny() {
        let t = screen(None, 80, 10, |_| {});
        assert!(text(t.backend().buffer()).contains("waiting for the first snapshot"));
        let mut old = fixtures::healthy();
        old.at_ms = NOW - 42_000;
        let t = screen(Some(old), 150, 34, |_| {});
        assert!(text(t.backend().buffer()).contains("data 42s old"));
        // Any size draws without panicking, down to nothing.
        for (w, h) in [(1, 1), (20, 5), (40, 12), (0, 0)] {
            screen(Some(fixtures::unplaceable_rank()), w, h, |s| s.help = true);
        }
    }

    /// With NO_COLOR the console draws no colour at all, and what colour meant is still there: the
    /// outlier's row is bold and keeps its ▲, a warning is underlined.
    #[test]
    fn no_color_draws_without_colours_and_keeps_emphasis() {
        let no_colour = crate::state::Options {
            colour: false,
            read_only: false,
        };
        let t = screen(Some(fixtures::slow_storage()), 150, 34, |s| s.options = no_colour);
        let buf = t.backend().buffer();
        let coloured: Vec<ratatui::layout::Position> = buf
            .area
            .positions()
            .filter(|&p| buf[p].fg != Color::Reset || buf[p].bg != Color::Reset)
            .collect();
        assert!(coloured.is_empty(), "cells with colour: {coloured:?}");
        let s = text(buf);
        let y = s.lines().position(|l| l.contains("storage-1 ▲")).unwrap() as u16;
        let x = s
            .lines()
            .nth(y as usize)
            .unwrap()
            .chars()
            .position(|c| c == '▲')
            .unwrap() as u16;
        assert!(buf[(x, y)].modifier.contains(Modifier::BOLD));
        // The same screen in colour has colours, and the same text.
        let coloured = screen(Some(fixtures::slow_storage()), 150, 34, |_| {});
        assert_eq!(text(coloured.backend().buffer()), s);
        assert!(
            coloured
                .backend()
                .buffer()
                .content
                .iter()
                .any(|c| c.fg == Color::Red),
            "the coloured screen has red"
        );
        let throttled = screen(Some(fixtures::throttled_rank()), 150, 34, |s| {
            s.options = no_colour
        });
        assert!(
            throttled
                .backend()
                .buffer()
                .content
                .iter()
                .any(|c| c.modifier.contains(Modifier::UNDERLINED)),
            "a warning (the drifted limit) is underlined"
        );
    }

    #[test]
    fn a_read_only_console_says_so_and_offers_no_fault_keys() {
        let ro = crate::state::Options {
            colour: true,
            read_only: true,
        };
        let t = screen(Some(fixtures::healthy()), 150, 34, |s| s.options = ro);
        let s = text(t.backend().buffer());
        let last = s.lines().last().unwrap();
        assert!(last.contains("read-only: keys change nothing"), "{last}");
        assert!(!s.contains("s/t/u inject"), "{s}");
        let t = screen(Some(fixtures::healthy()), 150, 34, |s| {
            s.options = ro;
            s.help = true;
        });
        let s = text(t.backend().buffer());
        assert!(s.contains("Read-only console"), "{s}");
        assert!(!s.contains("s / S"), "{s}");
        assert!(!s.contains("clear every active fault"), "{s}");
    }

    #[test]
    fn the_outlier_is_red() {
        let t = screen(Some(fixtures::slow_storage()), 150, 34, |_| {});
        let buf = t.backend().buffer();
        let s = text(buf);
        let y = s.lines().position(|l| l.contains("storage-1 ▲")).unwrap() as u16;
        let x = s
            .lines()
            .nth(y as usize)
            .unwrap()
            .chars()
            .position(|c| c == '▲')
            .unwrap() as u16;
        assert_eq!(buf[(x, y)].fg, Color::Red);
        let y0 = s.lines().position(|l| l.contains("│storage-0 ")).unwrap() as u16;
        assert_ne!(buf[(x - 3, y0)].fg, Color::Red);
    }
}
