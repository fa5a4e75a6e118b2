//! Which agents each connection of the HTTP load generator (http_load.rs) sends heartbeats for, and to which
//! server, when it drives several servers at once.

/// How the generator's connections and the agents they heartbeat for are spread over the servers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// Connection `c` goes to server `c % servers` and walks the agents `c`, `c + connections`, …: every agent
    /// always reaches the same server (as behind a sticky load balancer), the servers share no agent.
    Sticky,
    /// Connection `c` goes to server `i = c % servers`; the connections of each server walk the whole fleet as one
    /// server's would, server `i` starting `i / servers` of the way in: every agent reaches every server, at
    /// different moments (as behind a load balancer that spreads each agent's requests).
    Fleet,
    /// As [`Spread::Fleet`], every server starting at the first agent: the same agents reach every server at about
    /// the same moment, the most contention on their rows there can be.
    Lockstep,
}

impl Spread {
    /// `fleet`, `sticky` or `lockstep`.
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "fleet" => Some(Self::Fleet),
            "sticky" => Some(Self::Sticky),
            "lockstep" => Some(Self::Lockstep),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Fleet => "fleet",
            Self::Sticky => "sticky",
            Self::Lockstep => "lockstep",
        }
    }

    /// Connection `connection`'s server and its walk through the agents. With one server every spread is the same:
    /// agents `c`, `c + connections`, ….
    pub fn assign(self, connection: u64, connections: u64, servers: u64, agents: u64) -> (usize, Walk) {
        let servers = servers.max(1);
        let agents = agents.max(1);
        let server = connection % servers;
        let (first, step) = match self {
            Self::Sticky => (connection % agents, connections),
            Self::Fleet | Self::Lockstep => {
                let of_server = connections / servers + u64::from(server < connections % servers);
                let offset = if self == Self::Fleet { server * agents / servers } else { 0 };
                ((connection / servers + offset) % agents, of_server)
            }
        };
        (usize::try_from(server).unwrap_or(usize::MAX), Walk { next: first, step: step.max(1) % agents, agents })
    }
}

/// One connection's endless way through the agent ids `0..agents`.
#[derive(Clone, Debug)]
pub struct Walk {
    next: u64,
    step: u64,
    agents: u64,
}

impl Iterator for Walk {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let agent = self.next;
        self.next = (self.next + self.step) % self.agents;
        Some(agent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The agents that `server`'s connections heartbeat for in their first 100 requests each.
    fn agents_of(spread: Spread, connections: u64, servers: u64, agents: u64, server: usize) -> Vec<u64> {
        let mut seen: Vec<u64> = (0..connections)
            .map(|connection| spread.assign(connection, connections, servers, agents))
            .filter(|(of, _)| *of == server)
            .flat_map(|(_, walk)| walk.take(100))
            .collect();
        seen.sort_unstable();
        seen.dedup();
        seen
    }

    #[test]
    fn with_one_server_every_spread_walks_agents_c_then_c_plus_connections() {
        for spread in [Spread::Sticky, Spread::Fleet, Spread::Lockstep] {
            assert_eq!(agents_of(spread, 8, 1, 100, 0), (0..100).collect::<Vec<_>>(), "{spread:?}");
            let (server, walk) = spread.assign(3, 8, 1, 100);
            assert_eq!((server, walk.take(3).collect::<Vec<_>>()), (0, vec![3, 11, 19]), "{spread:?}");
        }
    }

    #[test]
    fn sticky_servers_share_no_agent_and_fleet_servers_each_see_every_agent() {
        let sticky = [agents_of(Spread::Sticky, 8, 2, 100, 0), agents_of(Spread::Sticky, 8, 2, 100, 1)];
        assert!(sticky[0].iter().all(|agent| !sticky[1].contains(agent)));
        assert_eq!(sticky[0].len() + sticky[1].len(), 100);
        for spread in [Spread::Fleet, Spread::Lockstep] {
            for server in 0..2 {
                assert_eq!(agents_of(spread, 8, 2, 100, server), (0..100).collect::<Vec<_>>(), "{spread:?}");
            }
        }
    }

    #[test]
    fn fleet_starts_the_second_server_half_the_fleet_in_and_lockstep_with_the_first() {
        let start = |spread: Spread, connection| {
            let (server, mut walk) = spread.assign(connection, 8, 2, 100);
            (server, walk.next().unwrap())
        };
        assert_eq!([start(Spread::Fleet, 0), start(Spread::Fleet, 1)], [(0, 0), (1, 50)]);
        assert_eq!([start(Spread::Lockstep, 0), start(Spread::Lockstep, 1)], [(0, 0), (1, 0)]);
        // Connections go round robin; an odd count gives the first server the extra one.
        let servers: Vec<usize> = (0..5).map(|connection| Spread::Fleet.assign(connection, 5, 2, 100).0).collect();
        assert_eq!(servers, [0, 1, 0, 1, 0]);
        let (_, walk) = Spread::Fleet.assign(0, 5, 2, 100);
        assert_eq!(walk.take(2).collect::<Vec<_>>(), [0, 3]);
    }

    #[test]
    fn names_round_trip() {
        for spread in [Spread::Sticky, Spread::Fleet, Spread::Lockstep] {
            assert_eq!(Spread::parse(spread.name()), Some(spread));
        }
        assert_eq!(Spread::parse("random"), None);
    }
}
