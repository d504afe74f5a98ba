//! Checks of the traffic-shape options beyond size and rate: `--burst`, `--rate-steps` and
//! `--ramp`. Each returns one usage line naming the fix.

use crate::{cli::TrafficArgs, error::Error, schedule::RateSchedule};

/// The rate schedule `--rate-steps` or `--ramp` asks for, with bit rates over `mean_payload`.
pub(crate) fn schedule(t: &TrafficArgs, mean_payload: f64) -> Result<Option<RateSchedule>, Error> {
    let parsed = match (&t.rate_steps, &t.ramp) {
        (Some(steps), _) => RateSchedule::parse_steps(steps, mean_payload),
        (None, Some(ramp)) => RateSchedule::parse_ramp(ramp, mean_payload),
        (None, None) => return Ok(None),
    };
    parsed.map(Some).map_err(Error::Usage)
}

/// The largest `--burst`.
pub(crate) const MAX_BURST: u64 = 32_768;

/// `--burst N` must be 1 (off) or more; a burst must be whole GSO trains and fit the send
/// window so it can leave back to back.
pub(crate) fn check_burst(burst: u64, gso: u16, window: u32) -> Result<(), Error> {
    let usage = |m: String| Err(Error::Usage(m));
    if burst == 0 || burst > MAX_BURST {
        return usage(format!(
            "--burst {burst} is out of range; use 1 (evenly spaced) to {MAX_BURST}"
        ));
    }
    let gso = u64::from(gso);
    if burst > 1 && !burst.is_multiple_of(gso) {
        return usage(format!(
            "--burst {burst} is not a whole number of --gso {gso} trains; use a multiple of {gso}"
        ));
    }
    let room = u64::from(window) * gso;
    if burst > room {
        return usage(format!(
            "--burst {burst} does not fit the {room} packets in flight (--window {window}); use --window {} or more",
            burst.div_ceil(gso)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_must_fit_the_window_and_the_trains() {
        assert!(check_burst(32, 1, 64).is_ok());
        assert!(check_burst(32, 4, 8).is_ok());
        assert!(check_burst(1, 46, 64).is_ok(), "no burst with any --gso");
        let e = |b, g, w| check_burst(b, g, w).unwrap_err().to_string();
        assert!(e(0, 1, 64).contains("out of range"));
        assert!(e(30, 4, 64).contains("multiple of 4"));
        assert!(e(100, 1, 64).contains("use --window 100"));
    }
}
