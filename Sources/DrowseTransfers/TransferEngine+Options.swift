import CCurl

extension TransferEngine.Options {
    /// What every request of every transfer gets: http and https only (also on redirects),
    /// TLS verification, stall detection, a connect timeout, no signals.
    func applyCommon(to easy: UnsafeMutableRawPointer, url: String) {
        _ = ccurl_setopt_str(easy, CURLOPT_URL, url)
        _ = ccurl_setopt_str(easy, CURLOPT_PROTOCOLS_STR, "http,https")
        _ = ccurl_setopt_str(easy, CURLOPT_REDIR_PROTOCOLS_STR, "http,https")
        _ = ccurl_setopt_long(easy, CURLOPT_NOSIGNAL, 1)
        _ = ccurl_setopt_long(easy, CURLOPT_SSL_VERIFYPEER, 1)
        _ = ccurl_setopt_long(easy, CURLOPT_SSL_VERIFYHOST, 2)
        _ = ccurl_setopt_long(easy, CURLOPT_LOW_SPEED_LIMIT, lowSpeedLimit)
        _ = ccurl_setopt_long(easy, CURLOPT_LOW_SPEED_TIME, lowSpeedTime)
        _ = ccurl_setopt_long(easy, CURLOPT_CONNECTTIMEOUT, 30)
        _ = ccurl_setopt_str(easy, CURLOPT_USERAGENT, userAgent)
    }
}
