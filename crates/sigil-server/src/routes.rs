//! The path table: every resource the server hosts, the methods it allows and the format a
//! GET offers, above the handlers in [`crate::rd`] and [`crate::broker`].
//!
//! What is checked here for every resource: an unknown path is 4.04, a method the resource
//! does not allow 4.05 (RFC 7252 §5.9.2.6), and for the link-format resources an Accept
//! naming another format 4.06 (§5.10.4) and If-Match / If-None-Match (§5.10.8: these
//! resources always exist and carry no ETag). Topics, whose format and existence depend on
//! what was published, check Accept and the preconditions in their handlers.

use crate::broker::Check;
use crate::context::{content, Ctx, Rejection, Reply, Request};
use crate::store::{Batch, StoreError};
use sigil_coap::link::write_link;
use sigil_coap::{Code, ContentFormat};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resource {
    /// `/.well-known/core` (RFC 6690 §4).
    Discovery,
    /// `/rd`: the registration interface (RFC 9176 §5).
    Directory,
    /// `/rd/N`: one registration (RFC 9176 §5.3).
    Registration,
    /// `/rd-lookup/ep` (RFC 9176 §6).
    LookupEndpoints,
    /// `/rd-lookup/res` (RFC 9176 §6).
    LookupResources,
    /// `/ps`: topic discovery.
    Topics,
    /// `/ps/N/<href>`: one topic.
    Topic,
    /// `/token`: the access-control server's token endpoint (RFC 9200 §5.8).
    Token,
    /// `/authz-info`: where a client posts its token (RFC 9200 §5.10.1).
    AuthzInfo,
    /// `/keys/<identity>`: a PSK-only node's reading key, for readers allowed to read it.
    ReadingKey,
}

struct Route {
    /// Path segments; `*` matches any one segment.
    path: &'static [&'static str],
    methods: &'static [Code],
    /// The one format a GET answers with, if the route decides it (see the module doc).
    offers: Option<ContentFormat>,
    resource: Resource,
}

const LINKS: Option<ContentFormat> = Some(ContentFormat::LINK_FORMAT);

const ROUTES: &[Route] = &[
    Route {
        path: &[".well-known", "core"],
        methods: &[Code::GET],
        offers: LINKS,
        resource: Resource::Discovery,
    },
    Route {
        path: &["rd"],
        methods: &[Code::POST],
        offers: None,
        resource: Resource::Directory,
    },
    Route {
        path: &["rd", "*"],
        methods: &[Code::POST, Code::DELETE],
        offers: None,
        resource: Resource::Registration,
    },
    Route {
        path: &["rd-lookup", "ep"],
        methods: &[Code::GET],
        offers: LINKS,
        resource: Resource::LookupEndpoints,
    },
    Route {
        path: &["rd-lookup", "res"],
        methods: &[Code::GET],
        offers: LINKS,
        resource: Resource::LookupResources,
    },
    Route {
        path: &["ps"],
        methods: &[Code::GET],
        offers: LINKS,
        resource: Resource::Topics,
    },
    Route {
        path: &["ps", "*", "*"],
        methods: &[Code::GET, Code::PUT],
        offers: None,
        resource: Resource::Topic,
    },
    Route {
        path: &["token"],
        methods: &[Code::POST],
        offers: None,
        resource: Resource::Token,
    },
    Route {
        path: &["authz-info"],
        methods: &[Code::POST],
        offers: None,
        resource: Resource::AuthzInfo,
    },
    Route {
        path: &["keys", "*"],
        methods: &[Code::GET],
        offers: Some(ContentFormat::COSE_KEY),
        resource: Resource::ReadingKey,
    },
];

fn route(path: &[String]) -> Option<&'static Route> {
    ROUTES.iter().find(|r| {
        r.path.len() == path.len() && r.path.iter().zip(path).all(|(p, s)| *p == "*" || p == s)
    })
}

impl Ctx<'_> {
    /// Handles one request of the batch. `check` is what step 1 found for a publication.
    pub fn handle(
        &mut self,
        b: &Batch<'_>,
        req: &Request,
        check: &Check,
    ) -> Result<Reply, StoreError> {
        let Some(route) = route(&req.path) else {
            return Ok(self.reject(Rejection::NotFound, req));
        };
        if !route.methods.contains(&req.code) {
            return Ok(self.reject(Rejection::MethodNotAllowed, req));
        }
        if let (Code::GET, Some(cf)) = (req.code, route.offers) {
            if !req.accepts(cf) {
                return Ok(self.reject(Rejection::NotAcceptable, req));
            }
            if !req.conditions.hold(Some(None)) {
                return Ok(self.reject(Rejection::PreconditionFailed, req));
            }
        }
        let id = req.path.get(1).map(String::as_str).unwrap_or("");
        match (route.resource, req.code) {
            (Resource::Discovery, _) => Ok(self.well_known_core(req)),
            (Resource::Directory, _) => self.register(b, req),
            (Resource::Registration, Code::POST) => self.update(b, req, id),
            (Resource::Registration, _) => self.remove(b, req, id),
            (r @ (Resource::LookupEndpoints | Resource::LookupResources | Resource::Topics), _) => {
                if let Err(why) = self.may_look_up(req) {
                    return Ok(self.reject(why, req));
                }
                match r {
                    Resource::Topics => Ok(self.topics()),
                    r => self.lookup(req, r == Resource::LookupResources),
                }
            }
            (Resource::Token, _) => Ok(self.token(req)),
            (Resource::AuthzInfo, _) => Ok(self.authz_info(req)),
            (Resource::ReadingKey, _) => Ok(self.reading_key(req)),
            (Resource::Topic, Code::PUT) => self.publish(b, req, check),
            (Resource::Topic, _) => self.read_topic(b, req),
        }
    }

    /// `GET /.well-known/core[?rt=…]` (RFC 6690 §4; `rt` may end in `*`, §4.1).
    fn well_known_core(&mut self, req: &Request) -> Reply {
        self.count("request.discovery");
        let all = [
            ("/rd", "core.rd"),
            ("/rd-lookup/ep", "core.rd-lookup-ep"),
            ("/rd-lookup/res", "core.rd-lookup-res"),
            ("/ps", "core.ps"),
        ];
        let mut out = String::new();
        for (href, rt) in all {
            if let Some(want) = req.query("rt") {
                let matches = match want.strip_suffix('*') {
                    Some(prefix) => rt.starts_with(prefix),
                    None => rt == want,
                };
                if !matches {
                    continue;
                }
            }
            if !out.is_empty() {
                out.push(',');
            }
            let _ = write_link(&mut out, href, &[("rt", Some(rt)), ("ct", Some("40"))]);
        }
        content(ContentFormat::LINK_FORMAT, out.into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Vec<String> {
        s.split('/').map(String::from).collect()
    }

    #[test]
    fn the_table_matches_whole_paths_only() {
        assert_eq!(
            route(&p("ps/3/m")).map(|r| r.resource),
            Some(Resource::Topic)
        );
        assert_eq!(
            route(&p("rd/3")).map(|r| r.resource),
            Some(Resource::Registration)
        );
        assert!(route(&p("ps/3")).is_none());
        assert!(route(&p("rd-lookup/x")).is_none());
        assert!(route(&p("ps/3/m/x")).is_none());
    }
}
