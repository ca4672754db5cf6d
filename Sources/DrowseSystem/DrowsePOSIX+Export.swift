// The checked system layer (checked calls, clocks, threads, the Unix-socket HTTP client) is part
// of what DrowseSystem offers: its users see it without importing it themselves.
@_exported import DrowsePOSIX
