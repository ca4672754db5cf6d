"""Shared wake windows with the real daemon (issue "The fetch planner", e2e): several apps at
seconds-scale intervals are launched together, never earlier than their intervals."""

import time

from drowse_e2e import notify_topic


def clusters(times, gap=0.5):
    """Groups sorted launch times that lie within `gap` seconds of the previous one."""
    out = []
    for t in sorted(times):
        if out and t - out[-1][-1] <= gap:
            out[-1].append(t)
        else:
            out.append([t])
    return out


def test_several_apps_share_windows_and_respect_their_intervals(make_drowse):
    d = make_drowse(handler_deadline="2s")
    intervals = {"a": 2.0, "b": 3.0, "c": 4.0, "d": 5.0}
    for app, every in intervals.items():
        d.add_app(app, fetch=d.recorder(app), minimum_interval=f"{every:g}s")
    d.start()
    time.sleep(16)
    d.stop()

    launches = {app: [r.start for r in d.runs(app)] for app in intervals}
    for app, times in launches.items():
        assert len(times) >= 3, f"{app} ran only {len(times)} times in 16 s"
        gaps = [b - a for a, b in zip(times, times[1:])]
        assert min(gaps) >= intervals[app] - 0.05, f"{app} launched sooner than its {intervals[app]} s interval: {gaps}"
        # The stated rule (due by the interval plus a 50 % tolerance) plus scheduling slack: no app starves.
        assert max(gaps) <= intervals[app] * 1.5 + 1.0, f"{app} waited too long between launches: {gaps}"

    all_times = [t for times in launches.values() for t in times]
    groups = clusters(all_times)
    # Four independent timers would give about as many wakeups as launches; shared windows give
    # far fewer, and most windows hold more than one app.
    assert len(groups) <= 0.6 * len(all_times), f"{len(all_times)} launches in {len(groups)} windows: {groups}"
    shared = [g for g in groups if len(g) > 1]
    assert len(shared) >= len(groups) / 2, f"only {len(shared)} of {len(groups)} windows were shared"


def test_a_notification_wakes_the_radio_and_due_fetches_ride_along(broker, make_drowse):
    """On LTE a notification's arrival has woken the modem: a fetch that is eligible (but
    would otherwise wait for its tolerance) runs with it instead of waking the radio again."""
    d = make_drowse(broker=broker, handler_deadline="5s", extra_config='[radio]\nmodel = "lte"\n')
    d.add_app("news", fetch=d.recorder("news-fetch"), minimum_interval="20s",
              notification=d.recorder("news-note"))
    d.start()
    broker.wait_subscribed(notify_topic("news"))
    [first] = d.wait_runs("news-fetch", 1, timeout=10)  # a new app is due at once
    # Eligible again 20 s later; its tolerance (50 %) would let it wait until 30 s.
    time.sleep(max(0.0, first.start + 20.5 - time.time()))
    d.push("news", "-d", "content-id=1")
    runs = d.wait_runs("news-fetch", 2, timeout=10)
    [note] = d.wait_runs("news-note", 1, timeout=10)
    second = runs[1].start
    assert second - first.start >= 20 - 0.05, "fetched before its minimum interval"
    assert abs(second - note.start) <= 1.0, f"the fetch did not ride the notification's wakeup: {second - note.start:.2f}s apart"
