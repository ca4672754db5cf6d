#!/usr/bin/env python3
"""An example resident app in Python, on DrowseKit for Python's asyncio interface
(Sources/drowsekit-python). drowsed starts it (deploy/apps.d/python-resident.toml) and keeps it
running; it sleeps in its event stream until drowsed has something for it. What the Swift
example (Sources/drowse-resident-example) does, plus a download of its own:

  - every event is printed (drowsed logs it) and appended to events.log in the output folder:
    `<kind> <id> <payload JSON>`;
  - a fetch writes the time into last-fetch and completes with new-data, or with what the file
    fetch-result in the output folder says (new-data, no-data or failed);
  - a notification is completed with new-data; when its payload has "task": N, the app begins a
    background task and works N seconds, then ends it; when drowsed warns that the background
    time runs out, the work stops and the task is ended (tasks.log says which); when it has
    "url": U (and "sha256": H), the app queues a background download of U in its session
    "python";
  - a transfers event's completed downloads are copied to downloads/<transfer id> and logged in
    transfers.log (`<id> <state> <sha256 of the copy>`); the event is completed with new-data,
    or failed when one of them failed;
  - each start appends the process id to starts; SIGUSR1 writes status.json (the process id,
    events handled so far, how often the stream was opened).

Usage: resident.py [--dir FOLDER]   (default: the working directory)
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Optional

from drowsekit import FETCH, NOTIFICATION, TASK_EXPIRING, TRANSFERS, DrowseError, Event, Result
from drowsekit.aio import AsyncDrowseApp, AsyncEventStream


def say(line: str) -> None:
    """A line for drowsed's log (the app's output is a pipe to drowsed)."""
    try:
        print(f"python-resident: {line}", flush=True)
    except OSError:
        # drowsed was killed and a new one adopted this process: nobody reads that pipe any more
        # (a BrokenPipeError here would end the app). Later lines go nowhere.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


class Example:
    def __init__(self, app: AsyncDrowseApp, folder: Path) -> None:
        self.app = app
        self.folder = folder
        self.handled = 0
        self.stream: Optional[AsyncEventStream] = None
        self.work: set[asyncio.Task[None]] = set()

    def write(self, name: str, line: str, replace: bool = False) -> None:
        with open(self.folder / name, "w" if replace else "a") as f:
            f.write(line + "\n")

    def dump_status(self) -> None:
        status = {"pid": os.getpid(), "handled": self.handled, "connections": self.stream.status.connections if self.stream else 0,
                  "written_at": time.time()}
        tmp = self.folder / "status.json.tmp"
        tmp.write_text(json.dumps(status) + "\n")
        tmp.replace(self.folder / "status.json")

    def fetch_result(self) -> Result:
        try:
            return Result((self.folder / "fetch-result").read_text().strip())
        except (OSError, ValueError):
            return Result.NEW_DATA

    async def handle(self, event: Event) -> Result:
        if event.kind == FETCH:
            self.write("last-fetch", f"{time.time():.3f}", replace=True)
            return self.fetch_result()
        if event.kind == NOTIFICATION:
            payload = event.payload if isinstance(event.payload, dict) else {}
            seconds = payload.get("task")
            if isinstance(seconds, (int, float)) and seconds > 0:
                # Begun before the notification is completed, so the app keeps a reason to run.
                await self.begin_work(float(seconds), event.id)
            url = payload.get("url")
            if isinstance(url, str):
                try:
                    t = await self.app.download(url, sha256=payload.get("sha256"), session="python")
                    self.write("transfers.log", f"queued {t.id} {url}")
                except DrowseError as e:
                    self.write("transfers.log", f"refused {url} {e.code}")
                    return Result.FAILED
            return Result.NEW_DATA
        # TRANSFERS
        downloads = self.folder / "downloads"
        downloads.mkdir(exist_ok=True)
        ok = True
        for t in event.transfers:
            digest = "-"
            if t.state == "completed" and t.location:
                # The inbox file is removed once this event is completed: keep a copy.
                shutil.copyfile(t.location, downloads / t.id)
                digest = hashlib.sha256((downloads / t.id).read_bytes()).hexdigest()
            else:
                ok = False
            self.write("transfers.log", f"{t.id} {t.state} {digest}")
        return Result.NEW_DATA if ok else Result.FAILED

    async def begin_work(self, seconds: float, for_event: str) -> None:
        """A background task and N seconds of work in it (standing for an upload, a sync), cut
        short when drowsed warns that the background time runs out."""
        expired = asyncio.Event()
        try:
            task = await self.app.begin_background_task(f"work-{for_event}", on_expire=expired.set)
        except DrowseError as e:
            self.write("tasks.log", f"{time.time():.3f} refused {for_event} {e.code}")
            return
        self.write("tasks.log", f"{time.time():.3f} begun {task.id} {seconds:g}")

        async def work() -> None:
            start = time.monotonic()
            left = await self.app.background_time_remaining()
            say(f"task {task.id}: {seconds:g}s of work, {left:.1f}s of background time left")
            try:
                await asyncio.wait_for(expired.wait(), seconds)  # the work itself, not a poll
                how = "expired"
            except asyncio.TimeoutError:
                how = "done"
            try:
                await self.app.end_background_task(task)
            except DrowseError as e:
                say(f"ending {task.id}: {e}")
            took = time.monotonic() - start
            say(f"task {task.id} {how} after {took:.1f}s")
            self.write("tasks.log", f"{time.time():.3f} {how} {task.id} {took:.1f}")

        job = asyncio.ensure_future(work())
        self.work.add(job)
        job.add_done_callback(self.work.discard)

    async def run(self) -> None:
        say(f"app '{self.app.app}' on {self.app.socket}, writing to {self.folder}")
        self.write("starts", str(os.getpid()))
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, self.dump_status)
        self.stream = self.app.events()
        async for event in self.stream:
            payload = {FETCH: event.reason, NOTIFICATION: event.payload, TASK_EXPIRING: {"task": event.task},
                       TRANSFERS: [t.raw for t in event.transfers]}[event.kind]
            line = f"{event.kind} {event.id} {json.dumps(payload)}"
            say(line)
            self.write("events.log", line)
            if not event.needs_completion:
                continue  # task-expiring: the task's callback has run
            try:
                result = await self.handle(event)
            except Exception as e:  # the example's own failure is the event's result
                say(f"handling {event.id}: {e!r}")
                result = Result.FAILED
            try:
                await self.app.complete(event, result)
                self.handled += 1
            except DrowseError as e:
                say(f"completing {event.id}: {e}")
        say("the event stream ended")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=".", help="the output folder (default: the working directory)")
    args = parser.parse_args()
    folder = Path(args.dir).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    try:
        asyncio.run(Example(AsyncDrowseApp(), folder).run())
    except DrowseError as e:
        print(f"python-resident: event stream: {e}", file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
