//! What a sharded replica's JSON log says it did, and when: shards acquired, released and lost,
//! syncers started and stopped. Turned into intervals per replica, these answer "did two
//! replicas ever hold the same shard, or run the same API's syncer, at once?".
//!
//! ```text
//! replica a:  acquired ──────────── released            starting syncer ──── stopping syncer
//! replica b:                            acquired ───         (must not begin before a's end)
//! killed c:   acquired ─────── ✕ kill time (its intervals end there)
//! ```
//!
//! A syncer's interval ends at its `stopping syncer` line: the supervisor then waits for the
//! task (at most the stop grace) before the shard leaves the replica, and the shard's Lease is
//! released only after that, so a successor's `starting syncer` comes later still.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::Value;

/// One thing a replica logged about its shards or syncers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// `shard acquired`: the replica took the shard's Lease; its work may start.
    Acquired(String),
    /// `shard released`: the replica gave the shard up after its work stopped; logged before
    /// the request that frees the Lease, so it always precedes the next holder's `acquired`.
    Released(String),
    /// `shard lost ...`: the replica dropped the shard (another holds it, or no renewal
    /// within the renew deadline).
    Lost(String),
    /// `starting syncer` of `<connection>/<api>`.
    SyncerStarted(String),
    /// `stopping syncer` of `<connection>/<api>`.
    SyncerStopping(String),
    /// `provider copy created` or `provider copy written` by the syncer of
    /// `<connection>/<api>`: a write to the provider that landed.
    Wrote(String),
}

/// An [`Event`] and when it was logged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logged {
    /// The log line's timestamp.
    pub at: Timestamp,
    /// What happened.
    pub event: Event,
}

/// Parses one JSON log line (`tracing-subscriber`'s format: `timestamp`, and `fields` holding
/// `message` and the structured fields). Lines of no interest, and lines that are not JSON
/// (a panic message), give `None`.
pub fn parse_line(line: &str) -> Option<Logged> {
    let value: Value = serde_json::from_str(line).ok()?;
    let at: Timestamp = value["timestamp"].as_str()?.parse().ok()?;
    let fields = &value["fields"];
    let message = fields["message"].as_str()?;
    let shard = || fields["shard"].as_str().map(str::to_string);
    let syncer = || {
        let (connection, api) = (fields["connection"].as_str()?, fields["api"].as_str()?);
        Some(format!("{connection}/{api}"))
    };
    let writer = || {
        let span = &value["span"];
        let (connection, api) = (span["connection"].as_str()?, span["api"].as_str()?);
        Some(format!("{connection}/{api}"))
    };
    let event = match message {
        "provider copy created" | "provider copy written" => Event::Wrote(writer()?),
        "shard acquired" => Event::Acquired(shard()?),
        "shard released" => Event::Released(shard()?),
        m if m.starts_with("shard lost") => Event::Lost(shard()?),
        "starting syncer" => Event::SyncerStarted(syncer()?),
        "stopping syncer" => Event::SyncerStopping(syncer()?),
        _ => return None,
    };
    Some(Logged { at, event })
}

/// Every event in the log file at `path`, in order.
pub fn read(path: &Path) -> anyhow::Result<Vec<Logged>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(text.lines().filter_map(parse_line).collect())
}

/// A time one replica held a shard or ran a syncer: from `from` until `to` (`None`: still).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interval {
    /// The replica's identity.
    pub replica: String,
    /// The shard key, or `<connection>/<api>` of a syncer.
    pub key: String,
    /// When it began.
    pub from: Timestamp,
    /// When it ended; `None` while it lasts.
    pub to: Option<Timestamp>,
}

impl Interval {
    /// Whether two intervals share a moment.
    pub fn overlaps(&self, other: &Interval) -> bool {
        let before = |end: Option<Timestamp>, start: Timestamp| end.is_some_and(|e| e <= start);
        !before(self.to, other.from) && !before(other.to, self.from)
    }
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let to = self.to.map_or_else(|| "now".to_string(), |t| t.to_string());
        write!(
            f,
            "{} on {} from {} to {to}",
            self.key, self.replica, self.from
        )
    }
}

/// Which events open and close an interval.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// Holding a shard: acquired until released or lost.
    Shard,
    /// Running a syncer: started until stopping.
    Syncer,
}

/// The intervals of `kind` in one replica's `events`. An interval still open at the end of the
/// log ends at `end` (the replica's kill time), or lasts (`None`: the replica still runs).
pub fn intervals(
    replica: &str,
    events: &[Logged],
    kind: Kind,
    end: Option<Timestamp>,
) -> Vec<Interval> {
    let mut open: BTreeMap<&str, Timestamp> = BTreeMap::new();
    let mut closed = Vec::new();
    let mut close = |key: &str, from: Timestamp, to: Option<Timestamp>| {
        closed.push(Interval {
            replica: replica.to_string(),
            key: key.to_string(),
            from,
            to,
        });
    };
    for logged in events {
        match (kind, &logged.event) {
            (Kind::Shard, Event::Acquired(key)) | (Kind::Syncer, Event::SyncerStarted(key)) => {
                open.entry(key).or_insert(logged.at);
            }
            (Kind::Shard, Event::Released(key) | Event::Lost(key))
            | (Kind::Syncer, Event::SyncerStopping(key)) => {
                if let Some(from) = open.remove(key.as_str()) {
                    close(key, from, Some(logged.at));
                }
            }
            _ => {}
        }
    }
    for (key, from) in open {
        close(key, from, end);
    }
    closed
}

/// Every pair of intervals on the same key from two different replicas that overlap, as
/// readable lines; empty when no two replicas ever had the same key at once.
pub fn overlapping(intervals: &[Interval]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, a) in intervals.iter().enumerate() {
        for b in &intervals[i + 1..] {
            if a.key == b.key && a.replica != b.replica && a.overlaps(b) {
                found.push(format!("{a}  overlaps  {b}"));
            }
        }
    }
    found
}

/// Every provider write in `writes` (`(replica, when, <connection>/<api>)`) that landed while
/// its replica did not hold the API's shard by `holding` (every replica's shard intervals), or
/// after another replica had taken the shard: empty when each write came from the one holder.
/// A write may land up to `margin` (the write timeout, Lease duration − renew deadline) after
/// its replica dropped the shard, never after the next holder acquired it.
pub fn writes_outside_holding(
    holding: &[Interval],
    writes: &[(String, Timestamp, String)],
    margin: Duration,
) -> Vec<String> {
    let margin = SignedDuration::try_from(margin).unwrap_or(SignedDuration::ZERO);
    let mut found = Vec::new();
    for (replica, at, key) in writes {
        let within = |i: &&Interval| {
            let end = i.to.and_then(|to| to.checked_add(margin).ok());
            &i.replica == replica && &i.key == key && i.from <= *at && end.is_none_or(|e| *at <= e)
        };
        let Some(held) = holding.iter().find(within) else {
            found.push(format!(
                "{replica} wrote {key} at {at} without holding its shard"
            ));
            continue;
        };
        let taken = holding.iter().find(|i| {
            &i.key == key && &i.replica != replica && held.from < i.from && i.from <= *at
        });
        if let Some(taken) = taken {
            found.push(format!(
                "{replica} wrote {key} at {at}, after {} took it at {}",
                taken.replica, taken.from
            ));
        }
    }
    found
}

/// The keys of the intervals still open (what the replica holds or runs now).
pub fn open_keys(intervals: &[Interval]) -> std::collections::BTreeSet<String> {
    intervals
        .iter()
        .filter(|i| i.to.is_none())
        .map(|i| i.key.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(at: &str, message: &str, fields: &str) -> String {
        format!(
            r#"{{"timestamp":"{at}","level":"INFO","fields":{{"message":"{message}"{fields}}},"target":"konnector"}}"#
        )
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    #[test]
    fn shard_and_syncer_lines_are_read_with_their_timestamps() {
        let acquired = line(
            "2026-01-01T00:00:01.5Z",
            "shard acquired",
            r#","shard":"east/a.example.org","identity":"r0""#,
        );
        let lost = line(
            "2026-01-01T00:00:02Z",
            "shard lost: no renewal within the renew deadline; its work stops",
            r#","shard":"east""#,
        );
        let started = line(
            "2026-01-01T00:00:03Z",
            "starting syncer",
            r#","connection":"east","api":"a.example.org","epoch":0"#,
        );
        assert_eq!(
            parse_line(&acquired),
            Some(Logged {
                at: at("2026-01-01T00:00:01.5Z"),
                event: Event::Acquired("east/a.example.org".into())
            })
        );
        assert_eq!(
            parse_line(&lost).map(|l| l.event),
            Some(Event::Lost("east".into()))
        );
        assert_eq!(
            parse_line(&started).map(|l| l.event),
            Some(Event::SyncerStarted("east/a.example.org".into()))
        );
        let wrote = r#"{"timestamp":"2026-01-01T00:00:04Z","level":"INFO","fields":{"message":"provider copy written"},"span":{"api":"a.example.org","connection":"east","name":"w-1","name":"reconcile"}}"#;
        assert_eq!(
            parse_line(wrote).map(|l| l.event),
            Some(Event::Wrote("east/a.example.org".into()))
        );
        assert_eq!(parse_line("thread 'main' panicked"), None);
        assert_eq!(parse_line(&line("2026-01-01T00:00:03Z", "other", "")), None);
    }

    #[test]
    fn intervals_end_at_the_closing_line_or_the_given_end() {
        let events = vec![
            Logged {
                at: at("2026-01-01T00:00:01Z"),
                event: Event::Acquired("k".into()),
            },
            Logged {
                at: at("2026-01-01T00:00:02Z"),
                event: Event::Released("k".into()),
            },
            Logged {
                at: at("2026-01-01T00:00:03Z"),
                event: Event::Acquired("k".into()),
            },
        ];
        let killed = Some(at("2026-01-01T00:00:04Z"));
        let found = intervals("r", &events, Kind::Shard, killed);
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].to, Some(at("2026-01-01T00:00:02Z")));
        assert_eq!(found[1].to, killed);
        assert!(open_keys(&intervals("r", &events, Kind::Shard, None)).contains("k"));
    }

    #[test]
    fn a_write_counts_only_from_the_holder_until_the_next_one_takes_over() {
        let held = |replica: &str, from: &str, to: Option<&str>| Interval {
            replica: replica.into(),
            key: "k".into(),
            from: at(from),
            to: to.map(at),
        };
        let holding = [
            held("a", "2026-01-01T00:00:01Z", Some("2026-01-01T00:00:05Z")),
            held("b", "2026-01-01T00:00:06Z", None),
        ];
        let write = |replica: &str, when: &str| (replica.to_string(), at(when), "k".to_string());
        let margin = Duration::from_secs(2);
        let fine = [
            write("a", "2026-01-01T00:00:02Z"),
            write("a", "2026-01-01T00:00:05.5Z"),
            write("b", "2026-01-01T00:00:07Z"),
        ];
        assert!(writes_outside_holding(&holding, &fine, margin).is_empty());
        let late = [write("a", "2026-01-01T00:00:06.5Z")];
        assert_eq!(writes_outside_holding(&holding, &late, margin).len(), 1);
        let unheld = [write("b", "2026-01-01T00:00:02Z")];
        assert_eq!(writes_outside_holding(&holding, &unheld, margin).len(), 1);
    }

    #[test]
    fn only_intervals_of_different_replicas_on_one_key_that_share_a_moment_overlap() {
        let interval = |replica: &str, key: &str, from: &str, to: Option<&str>| Interval {
            replica: replica.into(),
            key: key.into(),
            from: at(from),
            to: to.map(at),
        };
        let a = interval(
            "a",
            "k",
            "2026-01-01T00:00:01Z",
            Some("2026-01-01T00:00:02Z"),
        );
        let after = interval("b", "k", "2026-01-01T00:00:02Z", None);
        let during = interval("b", "k", "2026-01-01T00:00:01.5Z", None);
        let elsewhere = interval("b", "other", "2026-01-01T00:00:01Z", None);
        assert!(overlapping(&[a.clone(), after, elsewhere]).is_empty());
        assert_eq!(overlapping(&[a, during]).len(), 1);
    }
}
