//! (ours) The CPU latency-protection loop's decision core: sizes BE's CPU
//! from how long the LS pods' threads wait in the run queue, against the
//! target of the NodeSLO extension `cpuLatencyProtection` (see
//! `apis::slo::v1alpha1::cpu_latency_protection`), instead of upstream's
//! fixed `cpuSuppressThresholdPercent`.
//!
//! Signal: the LS threads' run-queue wait (schedstat field 2) over their CPU
//! run time (field 1) in the interval between two readings, in percent. The
//! shell ([`super::lsschedstat`]) turns per-thread readings into cumulative
//! counters and decides how often to read (its `MIN_READ_GAP`, the loop's
//! only throttle); this module only takes differences, so it is pure.
//!
//! Control (AIMD with a deadband and a fast way back):
//! - wait above the target → limit × `decreaseFactorPercent`, at once,
//!   whatever happened before (a decrease always wins);
//! - wait below `target × (1 - holdBandPercent)` for
//!   [`QUIET_ROUNDS_BEFORE_INCREASE`] rounds in a row → limit +
//!   `increaseStepPercent` of the node;
//! - LS idle, or its wait below `target /` [`FAR_BELOW_TARGET_DIVISOR`], for
//!   as many rounds in a row → limit + the larger of that step and half the
//!   gap to the upper bound (binary-search increase, as BIC-TCP does towards
//!   its last loss point). From anywhere, four such rounds close 15/16 of
//!   the gap, so BE is back to ≥ 90 % of its headroom five rounds after LS
//!   went idle, where the additive step alone needed up to
//!   `100 / increaseStepPercent` rounds. Far below the target a step of
//!   BE's size cannot be what brings LS to it; near the band the small step
//!   still probes, so the loop settles there instead of overshooting;
//! - otherwise the limit holds.
//!
//! No flapping: after a decrease caused by the wait, the fast increase
//! aims only at the limit that was cut ([`LastCut`]), above it the step is
//! additive again, so a load that suffers at some BE level is approached
//! slowly there, not re-hit every few rounds. That memory is dropped when
//! LS goes idle or the upper bound has grown by more than one step since
//! the cut (LS stepped down: the old level says nothing about the new load).
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
/// LS waiting less than `target / FAR_BELOW_TARGET_DIVISOR` is far from the
/// band: BE may close half its gap to the upper bound per round.
pub const FAR_BELOW_TARGET_DIVISOR: f64 = 4.0;
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
    /// The same reading as the previous round's (the shell reads at most
    /// every `MIN_READ_GAP` and hands closer rounds its last one); compared
    /// at the next new reading.
    Repeated,
}

/// The signal between `previous` and `current`.
pub fn signal(previous: Option<&LsSchedCounters>, current: &LsSchedCounters) -> LsSignal {
    let Some(previous) = previous else {
        return LsSignal::NoBaseline("first reading");
    };
    match current.taken_at.duration_since(previous.taken_at) {
        // A zero-length interval has no rate: the shell re-delivered its
        // last reading. Spacing readings out is the shell's job alone.
        Ok(gap) if gap.is_zero() => return LsSignal::Repeated,
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

/// The last decrease the wait caused: where BE was when LS suffered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastCut {
    /// The limit before the cut: the fast increase aims no higher.
    pub from: MilliCpu,
    /// The upper bound then; a bound grown by more than one step since
    /// means LS stepped down, and the cut no longer applies.
    pub upper: MilliCpu,
}

/// The loop's memory between rounds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardState {
    pub last: Option<LsSchedCounters>,
    /// The limit chosen last round; `None` before the first round.
    pub limit: Option<MilliCpu>,
    /// Rounds in a row below the band.
    pub quiet_rounds: u32,
    /// Rounds in a row with LS idle or far below the target.
    pub far_quiet_rounds: u32,
    pub last_cut: Option<LastCut>,
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
    // Never above the band's floor (a hold band over 75 % puts it lower):
    // far below is a kind of quiet.
    let far_floor = (target / FAR_BELOW_TARGET_DIVISOR).min(band_floor);
    let (quiet, far_quiet) = match signal {
        LsSignal::WaitPercent(wait) => (wait < band_floor, wait < far_floor),
        LsSignal::Idle => (true, true),
        LsSignal::NoBaseline(_) | LsSignal::Repeated => (false, false),
    };
    let count = |previous: u32, now: bool| match signal {
        LsSignal::Repeated => previous,
        _ if now => previous.saturating_add(1),
        _ => 0,
    };
    let quiet_rounds = count(state.quiet_rounds, quiet);
    let far_quiet_rounds = count(state.far_quiet_rounds, far_quiet);
    let step = MilliCpu(
        node.capacity
            .0
            .saturating_mul(settings.increase_step_percent)
            / 100,
    );
    // The cut's level stops mattering when LS has nothing to run or has
    // freed more than a step of CPU since.
    let last_cut = match (signal, state.last_cut) {
        (LsSignal::Idle, _) => None,
        (_, Some(cut)) if upper.0 > cut.upper.0.saturating_add(step.0) => None,
        (_, cut) => cut,
    };
    let breached = matches!(signal, LsSignal::WaitPercent(wait) if wait > target);
    let mut went_fast = false;
    let proposed = if breached {
        MilliCpu(current.0.max(0) * settings.decrease_factor_percent / 100)
    } else if quiet_rounds >= QUIET_ROUNDS_BEFORE_INCREASE {
        let additive = current.0.max(0).saturating_add(step.0);
        let fast_aim = last_cut.map_or(upper, |cut| cut.from.min(upper));
        let fast = if far_quiet_rounds >= QUIET_ROUNDS_BEFORE_INCREASE && fast_aim > current {
            // Half the gap, rounded up so it closes.
            current.0.max(0) + (fast_aim.0 - current.0.max(0) + 1) / 2
        } else {
            0
        };
        went_fast = fast > additive;
        MilliCpu(additive.max(fast))
    } else {
        current
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
        LsSignal::Repeated => "LS wait compared at the next reading (same reading)".to_string(),
    };
    let pace = if direction == Direction::Increase && went_fast {
        " (fast: half the gap, LS far below the target)"
    } else {
        ""
    };
    let explanation = format!(
        "latency loop: {seen} (target {}%, hold band from {band_floor:.1}%) -> {}{pace} BE {current} to {limit} (bounds {min}..{upper})",
        settings.target_wait_percent,
        direction.as_str(),
    );
    GuardStep {
        limit,
        direction,
        signal,
        bounds: (min, upper),
        state: GuardState {
            // A missing reading keeps the old baseline: the next reading
            // then covers the whole interval.
            last: counters.copied().or(state.last),
            limit: Some(limit),
            quiet_rounds,
            far_quiet_rounds,
            last_cut: if breached && limit < current {
                Some(LastCut {
                    from: current,
                    upper,
                })
            } else {
                last_cut
            },
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
            ..GuardState::default()
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
                // 5 %: below the band, not far below the target.
                Some(&counters(second, 50 * second, 1000 * second)),
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
    fn a_repeated_reading_holds_and_keeps_the_counts() {
        // The shell hands a round woken right after a tick its last reading.
        let repeated = counters(0, 0, 0);
        let state = GuardState {
            far_quiet_rounds: 1,
            ..primed(3000, 1)
        };
        let got = step(&settings(), &state, Some(&repeated), &node());
        assert_eq!(got.signal, LsSignal::Repeated);
        assert_eq!(
            (got.limit, got.direction),
            (MilliCpu(3000), Direction::Hold)
        );
        assert_eq!(got.state.last, Some(counters(0, 0, 0)));
        assert_eq!((got.state.quiet_rounds, got.state.far_quiet_rounds), (1, 1));
        // Spacing readings is the shell's job: any new one is compared.
        let soon = LsSchedCounters {
            taken_at: at(0) + Duration::from_millis(50),
            ..counters(0, 30, 100)
        };
        let got = step(&settings(), &primed(3000, 1), Some(&soon), &node());
        assert_eq!(got.signal, LsSignal::WaitPercent(30.0));
        assert_eq!(got.limit, MilliCpu(1500));
        // The bounds still apply at once (an LS step seen by the reaction path).
        let stepped = NodeFigures {
            ls_used: MilliCpu(6500),
            ..node()
        };
        let got = step(&settings(), &primed(3000, 1), Some(&repeated), &stepped);
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

    /// LS idle: 8 cores, LS at 0.1, system 0.5 → headroom 7400m.
    fn idle_node() -> NodeFigures {
        NodeFigures {
            ls_used: MilliCpu(100),
            ..node()
        }
    }

    /// Feeds `waits` (wait ms per 1,000 ms of LS run; `None`: LS idle) one
    /// round a second from `state`; the limits chosen.
    fn run_rounds(
        settings: &CPULatencyProtection,
        mut state: GuardState,
        node: &NodeFigures,
        waits: impl IntoIterator<Item = Option<u64>>,
    ) -> (Vec<i64>, GuardState) {
        let (mut wait, mut run) = state.last.map_or((0, 0), |c| (c.wait_ns, c.run_ns));
        let mut second = state.last.map_or(0, |c| {
            c.taken_at
                .duration_since(at(0))
                .map_or(0, |gap| gap.as_secs())
        });
        let mut limits = Vec::new();
        for round_wait in waits {
            second += 1;
            match round_wait {
                Some(ms) => {
                    wait += ms * 1_000_000;
                    run += 1_000_000_000;
                }
                // Under MIN_LS_RUN_PER_ROUND: idle.
                None => run += 1_000_000,
            }
            let reading = LsSchedCounters {
                taken_at: at(second),
                wait_ns: wait,
                run_ns: run,
                threads: 10,
                threads_skipped: 0,
            };
            let got = step(settings, &state, Some(&reading), node);
            limits.push(got.limit.0);
            state = got.state;
        }
        (limits, state)
    }

    #[test]
    fn idle_ls_gives_be_its_headroom_back_within_five_rounds() {
        // From the minimum (400m), LS idle: one quiet round holds, then each
        // round closes half the gap to 7400m. The additive step alone
        // would be at 2000m after five rounds.
        let (limits, _) = run_rounds(&settings(), primed(400, 0), &idle_node(), [None; 5]);
        assert_eq!(limits, [400, 3900, 5650, 6525, 6963]);
        assert!(limits[4] * 10 >= 7400 * 9, "{limits:?}");
        // LS busy but waiting far below the target (1 % against 10 %) does
        // the same.
        let (limits, _) = run_rounds(&settings(), primed(400, 0), &idle_node(), [Some(10); 5]);
        assert!(limits[4] * 10 >= 7400 * 9, "{limits:?}");
        let got = step(
            &settings(),
            &GuardState {
                far_quiet_rounds: 1,
                ..primed(400, 1)
            },
            Some(&counters(1, 0, 1)),
            &idle_node(),
        );
        assert!(got.explanation.contains("fast"), "{}", got.explanation);
        // A cut remembered from a busier LS does not hold it back once LS
        // is idle.
        let cut_when_busy = GuardState {
            last_cut: Some(LastCut {
                from: MilliCpu(800),
                upper: MilliCpu(1000),
            }),
            ..primed(400, 0)
        };
        let (limits, state) = run_rounds(&settings(), cut_when_busy, &idle_node(), [None; 5]);
        assert!(limits[4] * 10 >= 7400 * 9, "{limits:?}");
        assert_eq!(state.last_cut, None);
    }

    #[test]
    fn far_below_is_never_above_the_band_floor() {
        // A 90 % hold band puts the band's floor at 1 %, under target / 4:
        // 2 % is in the band and holds, 0.5 % is far below and goes fast.
        let wide = CPULatencyProtection {
            hold_band_percent: 90,
            ..settings()
        };
        let (limits, _) = run_rounds(&wide, primed(400, 0), &idle_node(), [Some(20); 3]);
        assert_eq!(limits, [400, 400, 400]);
        let (limits, _) = run_rounds(&wide, primed(400, 0), &idle_node(), [Some(5); 3]);
        assert_eq!(limits, [400, 3900, 5650]);
    }

    #[test]
    fn near_the_band_the_increase_stays_additive() {
        // 5 % against 10 % (band from 7 %, far below under 2.5 %): +400m.
        let (limits, state) = run_rounds(&settings(), primed(400, 0), &idle_node(), [Some(50); 5]);
        assert_eq!(limits, [400, 800, 1200, 1600, 2000]);
        assert_eq!(state.far_quiet_rounds, 0);
        // One far-quiet round between near-band ones does not go fast.
        let (limits, _) = run_rounds(
            &settings(),
            primed(400, 0),
            &idle_node(),
            [Some(50), Some(10), Some(50), Some(10)],
        );
        assert_eq!(limits, [400, 800, 1200, 1600]);
    }

    #[test]
    fn a_wait_above_the_target_cuts_at_once_and_the_ramp_stops_at_the_cut() {
        // Mid-way up the fast ramp, LS waits 30 %: halved that round.
        let (limits, state) = run_rounds(
            &settings(),
            primed(400, 0),
            &idle_node(),
            [None, None, None, Some(300)],
        );
        assert_eq!(limits, [400, 3900, 5650, 2825]);
        assert_eq!(
            state.last_cut,
            Some(LastCut {
                from: MilliCpu(5650),
                upper: MilliCpu(7400)
            })
        );
        // Far below the target again: fast only up to where LS suffered,
        // then the additive step (+400m) probes past it.
        let (limits, _) = run_rounds(&settings(), state.clone(), &idle_node(), [Some(10); 7]);
        assert_eq!(limits, [2825, 4238, 4944, 5344, 5744, 6144, 6544]);
        // A cut at the minimum stays there (nothing to cut), and a
        // decrease wins over any count of quiet rounds.
        let got = step(
            &settings(),
            &GuardState {
                far_quiet_rounds: 9,
                ..primed(6000, 9)
            },
            Some(&counters(1, 110, 1000)),
            &idle_node(),
        );
        assert_eq!(
            (got.limit, got.direction),
            (MilliCpu(3000), Direction::Decrease)
        );
        // LS stepping down (the upper bound grows by more than a step)
        // forgets the cut: the ramp goes for the whole headroom again.
        let busier = NodeFigures {
            ls_used: MilliCpu(5000),
            ..node()
        };
        let (_, cut) = run_rounds(&settings(), primed(2000, 0), &busier, [Some(300)]);
        assert_eq!(cut.last_cut.map(|c| c.upper), Some(MilliCpu(2500)));
        let (limits, state) = run_rounds(&settings(), cut, &idle_node(), [Some(10); 5]);
        assert_eq!(state.last_cut, None);
        assert!(limits[4] * 10 >= 7400 * 9, "{limits:?}");
    }

    /// A deterministic pseudo-random sequence in `0..bound` (64-bit LCG,
    /// Knuth's MMIX constants).
    fn noise(seed: u64, count: usize, bound: u64) -> Vec<u64> {
        let mut x = seed;
        (0..count)
            .map(|_| {
                x = x
                    .wrapping_mul(6_364_136_223_846_793_005)
                    .wrapping_add(1_442_695_040_888_963_407);
                (x >> 33) % bound
            })
            .collect()
    }

    fn direction_changes(limits: &[i64]) -> usize {
        let moves: Vec<bool> = limits
            .windows(2)
            .filter(|pair| pair[0] != pair[1])
            .map(|pair| pair[1] > pair[0])
            .collect();
        moves.windows(2).filter(|pair| pair[0] != pair[1]).count()
    }

    #[test]
    fn a_noisy_wait_around_the_target_does_not_flap() {
        // Closed loop: LS waits more the more CPU BE has (1 % + 2.25 % per
        // 1,000m of BE: the target 10 % sits at 4000m) plus noise of ±5 %,
        // so rounds near the target read now far below it (< 2.5 %), now
        // above it. 200 rounds from the formula's 2700m.
        for seed in [1, 7, 42, 2026] {
            let jitter = noise(seed, 200, 101);
            let mut state = GuardState {
                last: Some(counters(0, 0, 0)),
                limit: Some(MilliCpu(2700)),
                ..GuardState::default()
            };
            let mut limits = Vec::new();
            let mut breaches = 0;
            for jitter in &jitter {
                let limit = state.limit.map_or(0, |l| l.0) as u64;
                // Tenths of a percent of the run time.
                let wait_permille = (10 + limit * 225 / 10_000 + jitter).saturating_sub(50);
                if wait_permille > 100 {
                    breaches += 1;
                }
                let (got, next) =
                    run_rounds(&settings(), state, &idle_node(), [Some(wait_permille)]);
                limits.extend(got);
                state = next;
            }
            let changes = direction_changes(&limits);
            // Each cut is followed by two quiet rounds at least before a
            // rise, and the fast rise stops at the cut: under one change in
            // four rounds and one breach in eight (the additive-only rule
            // gave 35-42 changes and 17-23 breaches with these seeds; this
            // one 32-42 and 17-23).
            assert!(changes <= 50, "seed {seed}: {changes} changes: {limits:?}");
            assert!(
                breaches <= 25,
                "seed {seed}: {breaches} breaches: {limits:?}"
            );
            // After the first 100 rounds the limit stays within two steps
            // above where LS meets the target (4000m) and never collapses
            // to the minimum.
            let tail = &limits[100..];
            let (low, high) = (
                tail.iter().min().copied().unwrap_or_default(),
                tail.iter().max().copied().unwrap_or_default(),
            );
            assert!(low >= 800 && high <= 4800, "seed {seed}: {low}..{high}");
        }
    }
}
