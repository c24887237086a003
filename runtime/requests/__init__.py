"""What a request is, independent of the process handling it: the native generate input and its
validation, sampling parameters, stop regexes, the upstream fields accepted at their defaults,
and the typed finish reason and meta info that become JSON only at the API edge."""
