"""The edge: authenticate, pick the wire format, hand the request over; answer errors in the caller's format."""
