//! (ours) The CPU latency-protection loop's decision core: sizes BE's CPU
//! from how long the LS pods' threads wait in the run queue, against the
//! target of the NodeSLO extension `cpuLatencyProtection` (see
//! `apis::slo::v1alpha1::cpu_latency_protection`), instead of upstream's
//! fixed `cpuSuppressThresholdPercent`.
//!
//! Signal: the LS threads' run-queue wait (schedstat field 2) over their CPU
//! run time (field 1) in the interval between two rounds, in percent. The
//! shell ([`super::lsschedstat`]) turns per-thread readings into cumulative
//! counters; this module only takes differences, so it is pure.
//!
//! Control (AIMD with a deadband):
//! - wait above the target → limit × `decreaseFactorPercent` (fast);
//! - wait below `target × (1 - holdBandPercent)` for
//!   [`QUIET_ROUNDS_BEFORE_INCREASE`] rounds in a row → limit +
//!   `increaseStepPercent` of the node (slow);
//! - otherwise the limit holds.
//!
//! The limit is always clamped to `[minBECPUPercent, min(maxBECPUPercent,
//! capacity - LS used - system used)]` of the node, so an LS step (and the
//! reaction path's LS floor, which raises "LS used" between ticks) cuts BE
//! at once whatever the loop's own state.

use std::time::{Duration, SystemTime};

use apis::slo::v1alpha1::CPULatencyProtection;
use koord_common::units::MilliCpu;

/// Gauge: the LS wait ratio of the last round (wait ns / run ns).
pub const GAUGE_WAIT_RATIO: &str = "cpu_latency_guard_wait_ratio";
/// Gauge: the BE limit the loop chose, in cores.
pub const GAUGE_LIMIT_CORES: &str = "cpu_latency_guard_be_limit_cores";
/// Counter (`..._total`): rounds by `direction` (increase, decrease, hold).
pub const COUNTER_ADJUSTMENTS: &str = "cpu_latency_guard_adjustments";

/// Rounds in a row below the band before BE may grow: one quiet interval
/// right after a cut is what the cut bought, not spare room.
pub const QUIET_ROUNDS_BEFORE_INCREASE: u32 = 2;
/// Below this much LS run time in an interval the ratio is noise; LS is
/// treated as idle (nothing to protect).
pub const MIN_LS_RUN_PER_ROUND: Duration = Duration::from_millis(5);
/// Two readings closer than this are not compared (a round woken by the
/// reaction path right after a tick): the older baseline is kept, so the
/// next round covers the whole interval and the loop moves at most about
/// once per cpusuppress interval.
pub const MIN_SAMPLE_GAP: Duration = Duration::from_millis(200);
/// Two readings further apart than this are not compared (the loop was
/// off, or the shell stalled): the newer one becomes the baseline.
pub const MAX_SAMPLE_GAP: Duration = Duration::from_secs(30);

/// Cumulative LS scheduling counters as the shell keeps them: sums of the
/// per-thread increases seen since the sampler started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LsSchedCounters {
    pub taken_at: SystemTime,
    /// Run-queue wait, ns.
    pub wait_ns: u64,
    /// CPU run time, ns.
    pub run_ns: u64,
    /// Threads read for this reading.
    pub threads: usize,
    /// Threads left unread because of the per-round cap.
    pub threads_skipped: usize,
}

/// What the interval between two readings says about LS.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LsSignal {
    /// Wait as a percentage of run time.
    WaitPercent(f64),
    /// LS barely ran: nothing to protect.
    Idle,
    /// No usable interval (first reading, gap, counters went back).
    NoBaseline(&'static str),
    /// Too soon after the previous reading; compared at the next round.
    TooSoon,
}

/// The signal between `previous` and `current`.
pub fn signal(previous: Option<&LsSchedCounters>, current: &LsSchedCounters) -> LsSignal {
    let Some(previous) = previous else {
        return LsSignal::NoBaseline("first reading");
    };
    match current.taken_at.duration_since(previous.taken_at) {
        Ok(gap) if gap < MIN_SAMPLE_GAP => return LsSignal::TooSoon,
        Ok(gap) if gap <= MAX_SAMPLE_GAP => {}
        Ok(_) => return LsSignal::NoBaseline("readings too far apart"),
        Err(_) => return LsSignal::NoBaseline("reading older than the previous one"),
    }
    let (Some(wait), Some(run)) = (
        current.wait_ns.checked_sub(previous.wait_ns),
        current.run_ns.checked_sub(previous.run_ns),
    ) else {
        return LsSignal::NoBaseline("counters went back (sampler restarted)");
    };
    if run < MIN_LS_RUN_PER_ROUND.as_nanos() as u64 {
        return LsSignal::Idle;
    }
    LsSignal::WaitPercent(wait as f64 * 100.0 / run as f64)
}

/// Which way the loop moved BE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Increase,
    Decrease,
    Hold,
}

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Increase => "increase",
            Self::Decrease => "decrease",
            Self::Hold => "hold",
        }
    }
}

/// The node-level figures the bounds come from (one round's, in milli-CPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeFigures {
    pub capacity: MilliCpu,
    /// LS (non-BE) usage, raised to the reaction floor when one is fresh.
    pub ls_used: MilliCpu,
    /// Usage outside pods, at least the node's reserved CPU.
    pub system_used: MilliCpu,
    /// The threshold formula's budget: where the loop starts.
    pub formula_budget: MilliCpu,
}

/// The loop's memory between rounds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardState {
    pub last: Option<LsSchedCounters>,
    /// The limit chosen last round; `None` before the first round.
    pub limit: Option<MilliCpu>,
    /// Rounds in a row below the band.
    pub quiet_rounds: u32,
}

/// One round's result.
#[derive(Debug, Clone, PartialEq)]
pub struct GuardStep {
    pub limit: MilliCpu,
    pub direction: Direction,
    pub signal: LsSignal,
    /// The clamp range applied.
    pub bounds: (MilliCpu, MilliCpu),
    pub state: GuardState,
    /// Why, for the decision's notes and the write's reason.
    pub explanation: String,
}

/// `[min, upper]` for this round: the configured shares of the node, the
/// upper one also below what LS and the system leave; min wins a conflict.
pub fn bounds(settings: &CPULatencyProtection, node: &NodeFigures) -> (MilliCpu, MilliCpu) {
    let share = |percent: i64| node.capacity.0.saturating_mul(percent) / 100;
    let min = share(settings.min_be_cpu_percent);
    let left = node.capacity.0 - node.ls_used.0.max(0) - node.system_used.0.max(0);
    let upper = share(settings.max_be_cpu_percent).min(left).max(min);
    (MilliCpu(min), MilliCpu(upper))
}

/// One round of the loop. `counters` is this round's reading (`None`: the
/// shell could not read LS, and the limit holds within the bounds).
pub fn step(
    settings: &CPULatencyProtection,
    state: &GuardState,
    counters: Option<&LsSchedCounters>,
    node: &NodeFigures,
) -> GuardStep {
    let (min, upper) = bounds(settings, node);
    let current = state.limit.unwrap_or(node.formula_budget);
    let signal = match counters {
        Some(counters) => signal(state.last.as_ref(), counters),
        None => LsSignal::NoBaseline("no LS scheduling reading this round"),
    };
    let target = settings.target_wait_percent as f64;
    let band_floor = target * (100 - settings.hold_band_percent) as f64 / 100.0;
    let quiet = match signal {
        LsSignal::WaitPercent(wait) => wait < band_floor,
        LsSignal::Idle => true,
        LsSignal::NoBaseline(_) | LsSignal::TooSoon => false,
    };
    let quiet_rounds = match signal {
        LsSignal::TooSoon => state.quiet_rounds,
        _ if quiet => state.quiet_rounds.saturating_add(1),
        _ => 0,
    };
    let proposed = match signal {
        LsSignal::WaitPercent(wait) if wait > target => {
            MilliCpu(current.0.max(0) * settings.decrease_factor_percent / 100)
        }
        _ if quiet_rounds >= QUIET_ROUNDS_BEFORE_INCREASE => {
            MilliCpu(current.0.max(0) + node.capacity.0 * settings.increase_step_percent / 100)
        }
        _ => current,
    };
    let limit = proposed.clamp(min, upper);
    // What the round did to BE, after the clamp: a cut by the bounds alone
    // (an LS step) is a decrease too, and a limit below a raised minimum
    // grows.
    let direction = match limit.cmp(&current) {
        std::cmp::Ordering::Less => Direction::Decrease,
        std::cmp::Ordering::Greater => Direction::Increase,
        std::cmp::Ordering::Equal => Direction::Hold,
    };
    let seen = match signal {
        LsSignal::WaitPercent(wait) => format!("LS run-queue wait {wait:.1}% of run time"),
        LsSignal::Idle => "LS idle".to_string(),
        LsSignal::NoBaseline(why) => format!("no LS wait figure ({why})"),
        LsSignal::TooSoon => "LS wait compared next round (interval too short)".to_string(),
    };
    let explanation = format!(
        "latency loop: {seen} (target {}%, hold band from {band_floor:.1}%) -> {} BE {current} to {limit} (bounds {min}..{upper})",
        settings.target_wait_percent,
        direction.as_str(),
    );
    GuardStep {
        limit,
        direction,
        signal,
        bounds: (min, upper),
        state: GuardState {
            // A missing or too early reading keeps the old baseline: the
            // next reading then covers the whole interval.
            last: match signal {
                LsSignal::TooSoon => state.last,
                _ => counters.copied().or(state.last),
            },
            limit: Some(limit),
            quiet_rounds,
        },
        explanation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> CPULatencyProtection {
        CPULatencyProtection {
            target_wait_percent: 10,
            hold_band_percent: 30,
            min_be_cpu_percent: 5,
            max_be_cpu_percent: 100,
            increase_step_percent: 5,
            decrease_factor_percent: 50,
        }
    }

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + seconds)
    }

    /// 8 cores, LS at 2 cores, system at 0.5.
    fn node() -> NodeFigures {
        NodeFigures {
            capacity: MilliCpu(8000),
            ls_used: MilliCpu(2000),
            system_used: MilliCpu(500),
            formula_budget: MilliCpu(2700),
        }
    }

    fn counters(seconds: u64, wait_ms: u64, run_ms: u64) -> LsSchedCounters {
        LsSchedCounters {
            taken_at: at(seconds),
            wait_ns: wait_ms * 1_000_000,
            run_ns: run_ms * 1_000_000,
            threads: 10,
            threads_skipped: 0,
        }
    }

    /// A state with a baseline at t=0 (0 wait, 0 run) and `limit`.
    fn primed(limit: i64, quiet_rounds: u32) -> GuardState {
        GuardState {
            last: Some(counters(0, 0, 0)),
            limit: Some(MilliCpu(limit)),
            quiet_rounds,
        }
    }

    #[test]
    fn the_signal_is_wait_over_run_in_the_interval() {
        let previous = counters(0, 100, 1000);
        assert_eq!(
            signal(Some(&previous), &counters(1, 300, 2000)),
            LsSignal::WaitPercent(20.0)
        );
        assert_eq!(
            signal(Some(&previous), &counters(1, 101, 1002)),
            LsSignal::Idle
        );
        assert!(matches!(
            signal(None, &previous),
            LsSignal::NoBaseline("first reading")
        ));
        assert!(matches!(
            signal(Some(&previous), &counters(40, 300, 2000)),
            LsSignal::NoBaseline(_)
        ));
        assert!(matches!(
            signal(Some(&counters(2, 0, 0)), &counters(1, 300, 2000)),
            LsSignal::NoBaseline(_)
        ));
        assert!(matches!(
            signal(Some(&previous), &counters(1, 50, 2000)),
            LsSignal::NoBaseline(_)
        ));
    }

    #[test]
    fn above_target_decreases_multiplicatively() {
        // 30% wait against a 10% target: 4000m halves to 2000m.
        let got = step(
            &settings(),
            &primed(4000, 5),
            Some(&counters(1, 300, 1000)),
            &node(),
        );
        assert_eq!(
            (got.limit, got.direction),
            (MilliCpu(2000), Direction::Decrease)
        );
        assert_eq!(got.state.quiet_rounds, 0);
        // Repeated breaches go down to the minimum (5% of 8 cores), not below.
        let mut state = primed(4000, 0);
        for second in 1..=10 {
            let got = step(
                &settings(),
                &state,
                Some(&counters(second, 300 * second, 1000 * second)),
                &node(),
            );
            state = got.state;
        }
        assert_eq!(state.limit, Some(MilliCpu(400)));
    }

    #[test]
    fn in_band_holds() {
        // Band is 7%..10%: 8% and exactly 10% hold, whatever the quiet count.
        for wait_ms in [80, 100] {
            let got = step(
                &settings(),
                &primed(3000, 7),
                Some(&counters(1, wait_ms, 1000)),
                &node(),
            );
            assert_eq!(
                (got.limit, got.direction),
                (MilliCpu(3000), Direction::Hold),
                "{wait_ms}"
            );
            assert_eq!(got.state.quiet_rounds, 0);
        }
    }

    #[test]
    fn below_band_increases_after_quiet_rounds_up_to_the_bound() {
        let mut state = primed(1000, 0);
        let mut limits = Vec::new();
        for second in 1..=8 {
            let got = step(
                &settings(),
                &state,
                Some(&counters(second, 10 * second, 1000 * second)),
                &node(),
            );
            limits.push((got.limit.0, got.direction));
            state = got.state;
        }
        // First quiet round holds; then +400m (5% of 8 cores) per round up
        // to 8000 - 2000 - 500 = 5500m.
        assert_eq!(
            limits,
            [
                (1000, Direction::Hold),
                (1400, Direction::Increase),
                (1800, Direction::Increase),
                (2200, Direction::Increase),
                (2600, Direction::Increase),
                (3000, Direction::Increase),
                (3400, Direction::Increase),
                (3800, Direction::Increase),
            ]
        );
        let mut state = primed(5300, 3);
        let got = step(&settings(), &state, Some(&counters(1, 0, 1000)), &node());
        assert_eq!(got.limit, MilliCpu(5500));
        state = got.state;
        let got = step(&settings(), &state, Some(&counters(2, 0, 2000)), &node());
        assert_eq!(
            (got.limit, got.direction),
            (MilliCpu(5500), Direction::Hold)
        );
        // maxBECPUPercent caps it further.
        let capped = CPULatencyProtection {
            max_be_cpu_percent: 50,
            ..settings()
        };
        let got = step(
            &capped,
            &primed(5300, 3),
            Some(&counters(1, 0, 1000)),
            &node(),
        );
        assert_eq!(got.limit, MilliCpu(4000));
    }

    #[test]
    fn an_ls_step_cuts_be_through_the_bounds_at_once() {
        // Quiet LS, but LS usage jumps to 6.5 cores: upper = 1000m.
        let stepped = NodeFigures {
            ls_used: MilliCpu(6500),
            ..node()
        };
        let got = step(
            &settings(),
            &primed(4000, 5),
            Some(&counters(1, 0, 1000)),
            &stepped,
        );
        assert_eq!(
            (got.limit, got.direction),
            (MilliCpu(1000), Direction::Decrease)
        );
        // LS above the whole node: the minimum still holds.
        let full = NodeFigures {
            ls_used: MilliCpu(9000),
            ..node()
        };
        let got = step(
            &settings(),
            &primed(4000, 0),
            Some(&counters(1, 0, 1000)),
            &full,
        );
        assert_eq!(got.limit, MilliCpu(400));
        assert_eq!(got.bounds, (MilliCpu(400), MilliCpu(400)));
    }

    #[test]
    fn the_first_round_starts_from_the_formula_and_a_missing_reading_holds() {
        let got = step(
            &settings(),
            &GuardState::default(),
            Some(&counters(0, 0, 0)),
            &node(),
        );
        assert_eq!(
            (got.limit, got.direction),
            (MilliCpu(2700), Direction::Hold)
        );
        assert_eq!(got.state.last, Some(counters(0, 0, 0)));
        let got = step(&settings(), &primed(3000, 5), None, &node());
        assert_eq!(
            (got.limit, got.direction),
            (MilliCpu(3000), Direction::Hold)
        );
        // The baseline is kept for the next reading.
        assert_eq!(got.state.last, Some(counters(0, 0, 0)));
        assert_eq!(got.state.quiet_rounds, 0);
        assert!(
            got.explanation.contains("no LS wait figure"),
            "{}",
            got.explanation
        );
    }

    #[test]
    fn a_reading_right_after_the_last_holds_and_keeps_the_baseline() {
        let soon = LsSchedCounters {
            taken_at: at(0) + Duration::from_millis(50),
            ..counters(0, 300, 1000)
        };
        let got = step(&settings(), &primed(3000, 1), Some(&soon), &node());
        assert_eq!(got.signal, LsSignal::TooSoon);
        assert_eq!(
            (got.limit, got.direction),
            (MilliCpu(3000), Direction::Hold)
        );
        assert_eq!(got.state.last, Some(counters(0, 0, 0)));
        assert_eq!(got.state.quiet_rounds, 1);
        // The bounds still apply at once (an LS step seen by the reaction path).
        let stepped = NodeFigures {
            ls_used: MilliCpu(6500),
            ..node()
        };
        let got = step(&settings(), &primed(3000, 1), Some(&soon), &stepped);
        assert_eq!(
            (got.limit, got.direction),
            (MilliCpu(1000), Direction::Decrease)
        );
    }

    #[test]
    fn idle_ls_counts_as_quiet() {
        let got = step(
            &settings(),
            &primed(1000, 1),
            Some(&counters(1, 0, 1)),
            &node(),
        );
        assert_eq!(got.signal, LsSignal::Idle);
        assert_eq!(
            (got.limit, got.direction),
            (MilliCpu(1400), Direction::Increase)
        );
    }
}
