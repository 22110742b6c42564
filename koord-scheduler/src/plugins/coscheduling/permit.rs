//! The Permit decision of Coscheduling, pure: whether a gang member that
//! has just been assumed at `/bind` lets its whole gang group bind, or
//! waits for the rest; and, when a held member's wait ends unbound, whether
//! the whole group is released with it (upstream's reject-all).

use apis::extension::coscheduling::{GangMatchPolicy, GangMode};

/// What Permit sees of one gang of the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangCount {
    /// False when the gang could not be resolved (no PodGroup, no member):
    /// upstream's uninitialised gang, which never lets its group pass.
    pub known: bool,
    pub min_member: usize,
    pub match_policy: GangMatchPolicy,
    /// Members assumed and held at Permit, the deciding pod included.
    pub waiting: usize,
    /// Members bound (or being bound) through the API.
    pub bound: usize,
}

/// Whether one gang lets the group go, by its match policy: only-waiting
/// counts held members, waiting-and-running held and bound ones, and
/// once-satisfied held members or the group's earlier satisfaction.
pub fn gang_ready(gang: &GangCount, group_once_satisfied: bool) -> bool {
    if !gang.known {
        return false;
    }
    match gang.match_policy {
        GangMatchPolicy::OnlyWaiting => gang.waiting >= gang.min_member,
        GangMatchPolicy::WaitingAndRunning => gang.waiting + gang.bound >= gang.min_member,
        GangMatchPolicy::OnceSatisfied => gang.waiting >= gang.min_member || group_once_satisfied,
    }
}

/// Permit's verdict for the deciding member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every gang of the group is ready: all held members of the group bind.
    AllowGroup,
    /// Hold the member (and its resources) until the group is ready.
    Wait,
}

/// Upstream's Permit: the group goes when every gang in it is ready.
pub fn decide(group: &[GangCount], group_once_satisfied: bool) -> Verdict {
    if !group.is_empty() && group.iter().all(|g| gang_ready(g, group_once_satisfied)) {
        Verdict::AllowGroup
    } else {
        Verdict::Wait
    }
}

/// What ends with a held member whose wait ended unbound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReleaseScope {
    /// Only that member.
    Member,
    /// Every held member of its gang group.
    Group,
}

/// Upstream's Unreserve: a Strict gang rejects its whole group, unless it
/// matches once-satisfied and the group was satisfied before; NonStrict
/// releases only the member.
pub fn release_scope(
    mode: GangMode,
    match_policy: GangMatchPolicy,
    group_once_satisfied: bool,
) -> ReleaseScope {
    let satisfied_before = match_policy == GangMatchPolicy::OnceSatisfied && group_once_satisfied;
    if mode == GangMode::Strict && !satisfied_before {
        ReleaseScope::Group
    } else {
        ReleaseScope::Member
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gang(min: usize, waiting: usize, bound: usize, policy: GangMatchPolicy) -> GangCount {
        GangCount {
            known: true,
            min_member: min,
            match_policy: policy,
            waiting,
            bound,
        }
    }

    use GangMatchPolicy::{OnceSatisfied, OnlyWaiting, WaitingAndRunning};

    /// The cases of upstream's `core_test.go` TestPermit, as facts: the
    /// deciding pod is counted among the waiting members (upstream adds it
    /// to the assumed pods first).
    #[test]
    fn upstream_permit_cases() {
        struct Case {
            name: &'static str,
            group: Vec<GangCount>,
            once_satisfied: bool,
            want: Verdict,
        }
        let cases = [
            Case {
                name: "pod of a PodGroup that does not exist waits",
                group: vec![GangCount {
                    known: false,
                    ..gang(1, 1, 0, OnceSatisfied)
                }],
                once_satisfied: false,
                want: Verdict::Wait,
            },
            Case {
                name: "gang of 3 with 2 assumed waits",
                group: vec![gang(3, 2, 0, OnceSatisfied)],
                once_satisfied: false,
                want: Verdict::Wait,
            },
            Case {
                name: "gang of 3 with 2 assumed but once satisfied goes",
                group: vec![gang(3, 2, 0, OnceSatisfied)],
                once_satisfied: true,
                want: Verdict::AllowGroup,
            },
            Case {
                name: "once satisfied does not help only-waiting",
                group: vec![gang(3, 2, 0, OnlyWaiting)],
                once_satisfied: true,
                want: Verdict::Wait,
            },
            Case {
                name: "only-waiting does not count a running member",
                group: vec![gang(3, 2, 1, OnlyWaiting)],
                once_satisfied: true,
                want: Verdict::Wait,
            },
            Case {
                name: "waiting-and-running counts the running member",
                group: vec![gang(3, 2, 1, WaitingAndRunning)],
                once_satisfied: true,
                want: Verdict::AllowGroup,
            },
            Case {
                name: "third assumed member of a gang of 3 lets it go",
                group: vec![gang(3, 3, 0, OnceSatisfied)],
                once_satisfied: false,
                want: Verdict::AllowGroup,
            },
            Case {
                name: "gang group: own gang ready, the other gang not",
                group: vec![gang(2, 2, 0, OnceSatisfied), gang(2, 1, 0, OnceSatisfied)],
                once_satisfied: false,
                want: Verdict::Wait,
            },
            Case {
                name: "gang group: both gangs ready",
                group: vec![gang(2, 2, 0, OnceSatisfied), gang(3, 3, 0, OnceSatisfied)],
                once_satisfied: false,
                want: Verdict::AllowGroup,
            },
        ];
        for case in cases {
            assert_eq!(
                decide(&case.group, case.once_satisfied),
                case.want,
                "{}",
                case.name
            );
        }
    }

    /// Upstream's coscheduling_test.go TestPermit cases over a gang group
    /// [gangC (min 2), gangD (min 2)]: gangD's second member arrives while
    /// gangC has three members waiting → Success; [gangA (min 3), gangB
    /// (min 2)] with gangB's two waiting and one of gangA → Wait.
    #[test]
    fn upstream_gang_group_cases() {
        let c_and_d = [gang(2, 3, 0, OnceSatisfied), gang(2, 2, 0, OnceSatisfied)];
        assert_eq!(decide(&c_and_d, false), Verdict::AllowGroup);
        let a_and_b = [gang(3, 1, 0, OnceSatisfied), gang(2, 2, 0, OnceSatisfied)];
        assert_eq!(decide(&a_and_b, false), Verdict::Wait);
        assert_eq!(decide(&[], true), Verdict::Wait);
    }

    /// Upstream's Unreserve: a timed-out member of a Strict gang rejects
    /// the group's waiting members (TestUnreserve), unless the group was
    /// once satisfied under once-satisfied; NonStrict only the member.
    #[test]
    fn upstream_unreserve_scope() {
        use GangMode::{NonStrict, Strict};
        let cases = [
            (Strict, OnceSatisfied, false, ReleaseScope::Group),
            (Strict, OnceSatisfied, true, ReleaseScope::Member),
            (Strict, OnlyWaiting, true, ReleaseScope::Group),
            (Strict, WaitingAndRunning, true, ReleaseScope::Group),
            (NonStrict, OnceSatisfied, false, ReleaseScope::Member),
            (NonStrict, OnlyWaiting, false, ReleaseScope::Member),
        ];
        for (mode, policy, once, want) in cases {
            assert_eq!(
                release_scope(mode, policy, once),
                want,
                "{mode:?} {policy:?} once={once}"
            );
        }
    }
}
