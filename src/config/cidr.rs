//! An address or a network, as the policy file's `[ui] trusted_proxies`
//! lists them: read once, where the file is read, so that `check-config`
//! and `serve` agree on what is trusted.

use std::net::IpAddr;
use std::str::FromStr;

/// An address or a network (`10.0.0.0/8`, `::1`), as [ui] trusted_proxies lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    bits: u8,
}

impl FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not an address or CIDR (10.0.0.0/8, 127.0.0.1, ::1)");
        let (addr, bits) = match s.split_once('/') {
            Some((a, b)) => (a, Some(b)),
            None => (s, None),
        };
        let net: IpAddr = addr.trim().parse().map_err(|_| bad())?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        // Digits only, no leading zero: `+0` and `00` are `0` to Rust's
        // parser, and would trust every address without looking like it.
        let digits = |b: &str| {
            !b.is_empty()
                && b.bytes().all(|c| c.is_ascii_digit())
                && (b == "0" || !b.starts_with('0'))
        };
        let bits = match bits.map(str::trim) {
            Some(b) if digits(b) => b.parse::<u8>().map_err(|_| bad())?,
            Some(_) => return Err(bad()),
            None => max,
        };
        if bits > max {
            return Err(bad());
        }
        Ok(Self { net, bits })
    }
}

impl Cidr {
    /// How many addresses it covers, as a power of two.
    pub fn span_bits(&self) -> u8 {
        let max = if self.net.is_ipv4() { 32 } else { 128 };
        max - self.bits
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        // An IPv4 peer may arrive as ::ffff:a.b.c.d on a dual-stack socket.
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.net, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX.checked_shl(32 - u32::from(self.bits)).unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.bits))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_contain_their_addresses_only() {
        let net: Cidr = "10.1.0.0/16".parse().unwrap();
        assert!(net.contains("10.1.200.3".parse().unwrap()));
        assert!(!net.contains("10.2.0.1".parse().unwrap()));
        assert!(net.contains("::ffff:10.1.0.9".parse().unwrap()));
        let one: Cidr = "127.0.0.1".parse().unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        let all: Cidr = "0.0.0.0/0".parse().unwrap();
        assert!(all.contains("8.8.8.8".parse().unwrap()));
        assert!("10.0.0.0/33".parse::<Cidr>().is_err());
        assert!("proxy".parse::<Cidr>().is_err());
        for sneaky in [
            "0.0.0.0/00",
            "0.0.0.0/+0",
            "0.0.0.0/0x",
            "10.0.0.0/8/8",
            "fe80::1%eth0",
        ] {
            assert!(sneaky.parse::<Cidr>().is_err(), "{sneaky}");
        }
        assert_eq!(all.span_bits(), 32);
    }
}
