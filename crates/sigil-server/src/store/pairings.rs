//! The pairing messages this server issued (`sigil provision pair`, RFC 8387 §4.1; schema 7),
//! and what they grant: the pairing's default subscriber reads the device (a row in
//! `read_grants`, written with the pairing), and the pairing's group makes the device one of
//! the group's devices for read grants, as a kit member is (docs/security.md, "Pairing").

use super::{Store, StoreError};
use rusqlite::params;
use sigil_identity::Identity;

/// A pairing the server issued, as `sigil provision pair` recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PairingRow {
    pub device: Identity,
    pub serial: u64,
    pub group: Identity,
    pub subscriber: Identity,
    pub server_uri: Option<String>,
    /// Unix seconds it was issued at.
    pub paired_at: i64,
}

impl Store {
    /// Records a pairing message issued for `row.device` (replacing an earlier one for the same
    /// device) and grants its default subscriber read of the device, in one transaction.
    /// Returns whether the grant is new (false: the subscriber was granted already).
    pub fn record_pairing(&self, row: &PairingRow) -> Result<bool, StoreError> {
        // SQLite integers are signed: the serial is kept as its bits (read back `as u64`).
        let serial = row.serial as i64;
        self.shared_transaction(|b| {
            b.tx.execute(
                "INSERT INTO pairings (device, serial, grp, subscriber, server_uri, paired_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (device) DO UPDATE SET serial = ?2, grp = ?3, subscriber = ?4,
                     server_uri = ?5, paired_at = ?6",
                params![
                    row.device.to_string(),
                    serial,
                    row.group.to_string(),
                    row.subscriber.to_string(),
                    row.server_uri,
                    row.paired_at
                ],
            )?;
            let granted = b.tx.execute(
                "INSERT INTO read_grants (reader, object, granted_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (reader, object) DO NOTHING",
                params![
                    row.subscriber.to_string(),
                    row.device.to_string(),
                    row.paired_at
                ],
            )?;
            Ok(granted > 0)
        })
    }

    /// Every recorded pairing, by device.
    pub fn pairings(&self) -> Result<Vec<PairingRow>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT device, serial, grp, subscriber, server_uri, paired_at FROM pairings
             ORDER BY device",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, String>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, Option<String>>(4)?,
                r.get::<_, i64>(5)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (device, serial, group, subscriber, server_uri, paired_at) = row?;
            if let (Ok(device), Ok(group), Ok(subscriber)) = (
                Identity::parse(&device),
                Identity::parse(&group),
                Identity::parse(&subscriber),
            ) {
                out.push(PairingRow {
                    device,
                    serial: serial as u64,
                    group,
                    subscriber,
                    server_uri,
                    paired_at,
                });
            }
        }
        Ok(out)
    }

    /// The grants a server enforces: every row of `read_grants` (reader, object), and for each
    /// grant of a group that is not revoked, the devices a recorded pairing put in that group
    /// (a revoked group vouches for none of them, as a revoked kit refuses its members).
    pub fn effective_read_grants(&self) -> Result<Vec<(Identity, Identity)>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT reader, object FROM read_grants
             UNION
             SELECT g.reader, p.device FROM read_grants g JOIN pairings p ON p.grp = g.object
                 WHERE NOT EXISTS (SELECT 1 FROM identities i
                     WHERE i.identity = g.object AND i.revoked_at IS NOT NULL)
             ORDER BY 1, 2",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = Vec::new();
        for row in rows {
            let (reader, object) = row?;
            if let (Ok(r), Ok(o)) = (Identity::parse(&reader), Identity::parse(&object)) {
                out.push((r, o));
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(b: u8) -> Identity {
        Identity::from_bytes([b; 16])
    }

    fn row(device: u8, group: u8, subscriber: u8, serial: u64) -> PairingRow {
        PairingRow {
            device: id(device),
            serial,
            group: id(group),
            subscriber: id(subscriber),
            server_uri: Some("coaps://127.0.0.1:5684".into()),
            paired_at: 100,
        }
    }

    /// The subscriber is granted the device at once; a reader granted the group reads the
    /// device through the pairing (and only while a pairing names that group); the latest
    /// pairing of a device replaces an earlier one.
    #[test]
    fn a_pairing_grants_its_subscriber_and_puts_the_device_in_its_group() {
        let store = Store::open_in_memory().unwrap();
        assert!(store.record_pairing(&row(1, 0x0a, 0x0b, 7)).unwrap());
        assert_eq!(store.read_grants().unwrap(), vec![(id(0x0b), id(1))]);
        assert_eq!(store.pairings().unwrap(), vec![row(1, 0x0a, 0x0b, 7)]);
        store.grant_read(&id(0x0c), &id(0x0a), 5).unwrap();
        assert_eq!(
            store.effective_read_grants().unwrap(),
            vec![(id(0x0b), id(1)), (id(0x0c), id(1)), (id(0x0c), id(0x0a))]
        );
        // Paired again into another group: the group reader loses the device; the subscriber's
        // grant stays (an operator withdraws it with `ungrant`).
        assert!(!store.record_pairing(&row(1, 0x0d, 0x0b, 8)).unwrap());
        assert_eq!(store.pairings().unwrap(), vec![row(1, 0x0d, 0x0b, 8)]);
        assert_eq!(
            store.effective_read_grants().unwrap(),
            vec![(id(0x0b), id(1)), (id(0x0c), id(0x0a))]
        );
        store.record_pairing(&row(2, 0x0a, 0x0b, u64::MAX)).unwrap();
        assert_eq!(store.pairings().unwrap()[1].serial, u64::MAX);
        assert!(store
            .effective_read_grants()
            .unwrap()
            .contains(&(id(0x0c), id(2))));
        // A revoked group vouches for none of its paired devices any more.
        store
            .add_identity(&id(0x0a), crate::store::IdentityKind::Group, "", 1)
            .unwrap();
        assert!(store.revoke_identity(&id(0x0a), 2).unwrap());
        assert_eq!(
            store.effective_read_grants().unwrap(),
            vec![(id(0x0b), id(1)), (id(0x0b), id(2)), (id(0x0c), id(0x0a))]
        );
    }
}
