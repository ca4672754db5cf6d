import CCurl

extension TransferEngine.Options {
    /// What every request of every transfer gets: http and https only (also on redirects),
    /// TLS verification, stall detection, a connect timeout, no signals. Throws when libcurl
    /// refuses any setting the transfer must not run without.
    func applyCommon(to c: CurlCheck, url: String, protocols: ProtocolRule) throws(TransferError) {
        try c.setopt(CURLOPT_URL, "CURLOPT_URL", url)
        let (code, name) = protocols.apply(to: c.easy)
        try CurlCheck.check(code, name, .refuse, c.logger)
        // Signals from libcurl's resolver timeouts would hit any thread of the daemon.
        try c.setopt(CURLOPT_NOSIGNAL, "CURLOPT_NOSIGNAL", 1)
        try c.setopt(CURLOPT_SSL_VERIFYPEER, "CURLOPT_SSL_VERIFYPEER", 1)
        try c.setopt(CURLOPT_SSL_VERIFYHOST, "CURLOPT_SSL_VERIFYHOST", 2)
        // Stall detection: without it a silent server holds the transfer forever.
        try c.setopt(CURLOPT_LOW_SPEED_LIMIT, "CURLOPT_LOW_SPEED_LIMIT", lowSpeedLimit)
        try c.setopt(CURLOPT_LOW_SPEED_TIME, "CURLOPT_LOW_SPEED_TIME", lowSpeedTime)
        try c.setopt(CURLOPT_CONNECTTIMEOUT, "CURLOPT_CONNECTTIMEOUT", 30, .warn)
        try c.setopt(CURLOPT_USERAGENT, "CURLOPT_USERAGENT", userAgent, .warn)
    }
}
