#!/bin/sh
# shell: notification handler. Standard input is the notification's payload; one with a "url"
# queues a download of it for this app (drowse's --app defaults to the DROWSE_APP drowsed sets),
# and on-transfers.sh runs once the download has finished. The handler exits at once: the
# download goes on inside drowsed, past this handler's deadline and across restarts.
set -eu
# Installed, drowse is on the handler's PATH (/usr/bin, /usr/local/bin). Run from a checkout by
# deploy/run-local.sh it is not: use the checkout's build.
build="$(dirname "$0")/../../../.build/release"
if [ -x "$build/drowse" ]; then PATH="$build:$PATH"; fi

url=$(drowse payload url --default "")
if [ -z "$url" ]; then
    echo "shell: a notification without a url, nothing to do"
    exit 100                                        # no new data
fi
drowse transfer download "$url" --session files    # prints the new transfer's id
