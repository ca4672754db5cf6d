"""Shared wake windows with the real daemon: several apps at
seconds-scale intervals are launched together, never earlier than their intervals.

The timing rules themselves (which apps run in which window, none before its interval, none past
its tolerance, no extra fetch) are checked on the composed agent with a manual clock:
Tests/DrowseAgentTests/AgentTimingTests.swift. Here one real shared window is shown: real handler
processes launched together by drowsed's real timer, and each app's second launch not before its
interval."""

import time

from drowse_e2e import notify_topic


def test_several_apps_share_a_real_window_and_respect_their_intervals(make_drowse):
    d = make_drowse(handler_deadline="2s")
    intervals = {"a": 2.0, "b": 3.0}
    for app, every in intervals.items():
        d.add_app(app, fetch=d.recorder(app), minimum_interval=f"{every:g}s")
    d.start()
    launches = {app: [r.start for r in d.wait_runs(app, 2, timeout=15)] for app in intervals}
    d.stop()

    # New apps are all eligible at once: the first window launches every one of them together.
    firsts = [times[0] for times in launches.values()]
    assert max(firsts) - min(firsts) <= 0.5, f"the first launches were not one window: {launches}"
    for app, times in launches.items():
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert min(gaps) >= intervals[app] - 0.05, f"{app} launched sooner than its {intervals[app]} s interval: {gaps}"


def test_a_notification_wakes_the_radio_and_due_fetches_ride_along(broker, make_drowse):
    """On LTE a notification's arrival has woken the modem: a fetch that is eligible (but
    would otherwise wait for its tolerance) runs with it instead of waking the radio again."""
    d = make_drowse(broker=broker, handler_deadline="5s", extra_config='[radio]\nmodel = "lte"\n')
    d.add_app("news", fetch=d.recorder("news-fetch"), minimum_interval="2s",
              notification=d.recorder("news-note"))
    d.start()
    broker.wait_subscribed(notify_topic("news"))
    [first] = d.wait_runs("news-fetch", 1, timeout=10)  # a new app is due at once
    # Eligible again 2 s later; its tolerance (50 %) would let it wait until 3 s. The push comes
    # at 2.2 s: riding along, the fetch runs with it, well before its own window. (Which fetches
    # ride, and when, is the scheduler's rule, checked without sleeping in FetchSchedulerTests and
    # FetchPlannerAdaptationTests; here a real notification's wakeup carries a real fetch.)
    time.sleep(max(0.0, first.start + 2.2 - time.time()))
    d.push("news", "-d", "content-id=1")
    runs = d.wait_runs("news-fetch", 2, timeout=10)
    [note] = d.wait_runs("news-note", 1, timeout=10)
    second = runs[1].start
    assert second - first.start >= 2 - 0.05, "fetched before its minimum interval"
    assert second - first.start <= 3 - 0.3, f"the fetch waited for its own window: {second - first.start:.2f}s after the first"
    assert abs(second - note.start) <= 1.0, f"the fetch did not ride the notification's wakeup: {second - note.start:.2f}s apart"
