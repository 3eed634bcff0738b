//! SenML packs (RFC 8428): the CBOR (§6) and JSON (§5) representations.
//!
//! [`encode_cbor`] and [`encode_json`] write a pack into a caller buffer with no heap (the device
//! path). [`Pack::parse_cbor`] validates a received SenML-CBOR pack without copying. With the
//! `alloc` feature, [`resolve`] applies base fields and the validity rules of §4.5-§4.6, and
//! [`parse_json`] decodes SenML-JSON.

use crate::cbor::{CborError, Decoder, Encoder, Item};
use core::fmt;

/// SenML labels for CBOR (RFC 8428 §6, Table 4).
pub mod label {
    pub const BVER: i64 = -1;
    pub const BN: i64 = -2;
    pub const BT: i64 = -3;
    pub const BU: i64 = -4;
    pub const BV: i64 = -5;
    pub const BS: i64 = -6;
    pub const N: i64 = 0;
    pub const U: i64 = 1;
    pub const V: i64 = 2;
    pub const VS: i64 = 3;
    pub const VB: i64 = 4;
    pub const S: i64 = 5;
    pub const T: i64 = 6;
    pub const UT: i64 = 7;
    pub const VD: i64 = 8;
}

/// Most records Sigil accepts in one pack (bounds the work a hostile pack can cause).
pub const MAX_RECORDS: usize = 256;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value<'a> {
    Number(f64),
    String(&'a str),
    Bool(bool),
    Data(&'a [u8]),
}

/// One SenML record, borrowing its strings.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Record<'a> {
    pub base_name: Option<&'a str>,
    pub base_time: Option<f64>,
    pub base_unit: Option<&'a str>,
    pub base_value: Option<f64>,
    pub base_sum: Option<f64>,
    pub base_version: Option<u64>,
    pub name: Option<&'a str>,
    pub unit: Option<&'a str>,
    pub value: Option<Value<'a>>,
    pub sum: Option<f64>,
    pub time: Option<f64>,
    pub update_time: Option<f64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SenmlError {
    Cbor(CborError),
    /// The top level is not an array of maps.
    NotAPack,
    /// More than [`MAX_RECORDS`] records.
    TooManyRecords,
    /// A field has the wrong type (e.g. a text `v`).
    FieldType(&'static str),
    /// A field appears twice in one record.
    DuplicateField,
    /// A "must understand" label (text ending in `_`, §4.4) that Sigil does not know.
    MustUnderstand,
    /// After resolving, a name is empty or has characters outside §4.5.1.
    BadName,
    /// A record has no value and no sum, or more than one kind of value (§4.5).
    BadValue,
    /// A NaN or infinite number (not representable in SenML-JSON).
    NotFinite,
    /// The output buffer is full.
    BufferTooSmall,
    /// The JSON text is not a SenML pack.
    Json,
    /// Base version above 10 (the version this implementation knows, §4.4).
    UnsupportedVersion,
}

impl From<CborError> for SenmlError {
    fn from(e: CborError) -> Self {
        match e {
            CborError::BufferTooSmall => SenmlError::BufferTooSmall,
            e => SenmlError::Cbor(e),
        }
    }
}

impl fmt::Display for SenmlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cbor(e) => write!(f, "SenML-CBOR: {e}"),
            Self::NotAPack => f.write_str("SenML pack is not an array of records"),
            Self::TooManyRecords => f.write_str("SenML pack has too many records"),
            Self::FieldType(n) => write!(f, "SenML field {n} has the wrong type"),
            Self::DuplicateField => f.write_str("SenML field appears twice in a record"),
            Self::MustUnderstand => f.write_str("unknown must-understand SenML field"),
            Self::BadName => f.write_str("SenML record name missing or invalid"),
            Self::BadValue => f.write_str("SenML record needs exactly one value, or a sum"),
            Self::NotFinite => f.write_str("SenML number is NaN or infinite"),
            Self::BufferTooSmall => f.write_str("SenML output buffer too small"),
            Self::Json => f.write_str("SenML-JSON text is not a pack"),
            Self::UnsupportedVersion => f.write_str("SenML base version above 10"),
        }
    }
}

fn check_finite(v: Option<f64>) -> Result<(), SenmlError> {
    match v {
        Some(x) if !x.is_finite() => Err(SenmlError::NotFinite),
        _ => Ok(()),
    }
}

impl<'a> Record<'a> {
    fn field_count(&self) -> usize {
        [
            self.base_name.is_some(),
            self.base_time.is_some(),
            self.base_unit.is_some(),
            self.base_value.is_some(),
            self.base_sum.is_some(),
            self.base_version.is_some(),
            self.name.is_some(),
            self.unit.is_some(),
            self.value.is_some(),
            self.sum.is_some(),
            self.time.is_some(),
            self.update_time.is_some(),
        ]
        .iter()
        .filter(|b| **b)
        .count()
    }

    fn check_numbers(&self) -> Result<(), SenmlError> {
        for v in [
            self.base_time,
            self.base_value,
            self.base_sum,
            self.sum,
            self.time,
            self.update_time,
        ] {
            check_finite(v)?;
        }
        if let Some(Value::Number(v)) = self.value {
            check_finite(Some(v))?;
        }
        Ok(())
    }
}

/// Encodes a pack as SenML-CBOR (content-format 112) into `out`; returns the length.
pub fn encode_cbor(records: &[Record<'_>], out: &mut [u8]) -> Result<usize, SenmlError> {
    let mut e = Encoder::new(out);
    e.array(records.len())?;
    for r in records {
        r.check_numbers()?;
        e.map(r.field_count())?;
        // Deterministic order (RFC 8949 §4.2.1): 0..=8 before -1..=-6 in bytewise order.
        if let Some(n) = r.name {
            e.i64(label::N)?.text(n)?;
        }
        if let Some(u) = r.unit {
            e.i64(label::U)?.text(u)?;
        }
        match r.value {
            Some(Value::Number(v)) => {
                e.i64(label::V)?.number(v)?;
            }
            Some(Value::String(s)) => {
                e.i64(label::VS)?.text(s)?;
            }
            Some(Value::Bool(b)) => {
                e.i64(label::VB)?.bool(b)?;
            }
            Some(Value::Data(_)) | None => {}
        }
        if let Some(s) = r.sum {
            e.i64(label::S)?.number(s)?;
        }
        if let Some(t) = r.time {
            e.i64(label::T)?.number(t)?;
        }
        if let Some(t) = r.update_time {
            e.i64(label::UT)?.number(t)?;
        }
        if let Some(Value::Data(d)) = r.value {
            e.i64(label::VD)?.bytes(d)?;
        }
        if let Some(v) = r.base_version {
            e.i64(label::BVER)?.u64(v)?;
        }
        if let Some(n) = r.base_name {
            e.i64(label::BN)?.text(n)?;
        }
        if let Some(t) = r.base_time {
            e.i64(label::BT)?.number(t)?;
        }
        if let Some(u) = r.base_unit {
            e.i64(label::BU)?.text(u)?;
        }
        if let Some(v) = r.base_value {
            e.i64(label::BV)?.number(v)?;
        }
        if let Some(s) = r.base_sum {
            e.i64(label::BS)?.number(s)?;
        }
    }
    Ok(e.finish())
}

/// Encodes a pack as SenML-JSON (content-format 110) into `out`; returns the length.
pub fn encode_json(records: &[Record<'_>], out: &mut [u8]) -> Result<usize, SenmlError> {
    use crate::json::SliceWriter;
    use core::fmt::Write;
    let mut w = SliceWriter::new(out);
    let res: Result<(), fmt::Error> = (|| {
        w.write_char('[')?;
        for (i, r) in records.iter().enumerate() {
            if i > 0 {
                w.write_char(',')?;
            }
            w.write_char('{')?;
            let mut first = true;
            let mut field = |w: &mut SliceWriter, name: &str| -> fmt::Result {
                if !first {
                    w.write_char(',')?;
                }
                first = false;
                write!(w, "\"{name}\":")
            };
            if let Some(v) = r.base_version {
                field(&mut w, "bver")?;
                write!(w, "{v}")?;
            }
            if let Some(n) = r.base_name {
                field(&mut w, "bn")?;
                crate::json::write_string(&mut w, n)?;
            }
            if let Some(t) = r.base_time {
                field(&mut w, "bt")?;
                crate::json::write_number(&mut w, t)?;
            }
            if let Some(u) = r.base_unit {
                field(&mut w, "bu")?;
                crate::json::write_string(&mut w, u)?;
            }
            if let Some(v) = r.base_value {
                field(&mut w, "bv")?;
                crate::json::write_number(&mut w, v)?;
            }
            if let Some(v) = r.base_sum {
                field(&mut w, "bs")?;
                crate::json::write_number(&mut w, v)?;
            }
            if let Some(n) = r.name {
                field(&mut w, "n")?;
                crate::json::write_string(&mut w, n)?;
            }
            if let Some(u) = r.unit {
                field(&mut w, "u")?;
                crate::json::write_string(&mut w, u)?;
            }
            match r.value {
                Some(Value::Number(v)) => {
                    field(&mut w, "v")?;
                    crate::json::write_number(&mut w, v)?;
                }
                Some(Value::String(s)) => {
                    field(&mut w, "vs")?;
                    crate::json::write_string(&mut w, s)?;
                }
                Some(Value::Bool(b)) => {
                    field(&mut w, "vb")?;
                    w.write_str(if b { "true" } else { "false" })?;
                }
                Some(Value::Data(d)) => {
                    field(&mut w, "vd")?;
                    w.write_char('"')?;
                    crate::json::write_base64url(&mut w, d)?;
                    w.write_char('"')?;
                }
                None => {}
            }
            if let Some(s) = r.sum {
                field(&mut w, "s")?;
                crate::json::write_number(&mut w, s)?;
            }
            if let Some(t) = r.time {
                field(&mut w, "t")?;
                crate::json::write_number(&mut w, t)?;
            }
            if let Some(t) = r.update_time {
                field(&mut w, "ut")?;
                crate::json::write_number(&mut w, t)?;
            }
            w.write_char('}')?;
        }
        w.write_char(']')
    })();
    for r in records {
        r.check_numbers()?;
    }
    res.map_err(|_| SenmlError::BufferTooSmall)?;
    Ok(w.len())
}

/// A validated SenML-CBOR pack borrowing the received bytes.
#[derive(Clone, Copy, Debug)]
pub struct Pack<'a> {
    bytes: &'a [u8],
    count: usize,
}

impl<'a> Pack<'a> {
    /// Parses and validates every record (types, duplicates, must-understand labels).
    pub fn parse_cbor(bytes: &'a [u8]) -> Result<Self, SenmlError> {
        let mut d = Decoder::new(bytes);
        let count = match d.item()? {
            Item::Array(n) => n,
            _ => return Err(SenmlError::NotAPack),
        };
        if count > MAX_RECORDS {
            return Err(SenmlError::TooManyRecords);
        }
        for _ in 0..count {
            parse_record(&mut d)?;
        }
        d.finish()?;
        Ok(Self { bytes, count })
    }

    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    pub fn records(&self) -> impl Iterator<Item = Record<'a>> + 'a {
        let mut d = Decoder::new(self.bytes);
        let n = d.array().unwrap_or(0);
        (0..n).map_while(move |_| parse_record(&mut d).ok())
    }
}

fn set<T>(slot: &mut Option<T>, v: T) -> Result<(), SenmlError> {
    if slot.is_some() {
        return Err(SenmlError::DuplicateField);
    }
    *slot = Some(v);
    Ok(())
}

fn parse_record<'a>(d: &mut Decoder<'a>) -> Result<Record<'a>, SenmlError> {
    let n = match d.item()? {
        Item::Map(n) => n,
        _ => return Err(SenmlError::NotAPack),
    };
    let mut r = Record::default();
    for _ in 0..n {
        match d.item()? {
            Item::Unsigned(k) => parse_field(d, &mut r, k as i64)?,
            Item::Negative(k) => parse_field(d, &mut r, -1 - (k.min(1 << 62) as i64))?,
            Item::Text(t) => {
                if t.ends_with('_') {
                    return Err(SenmlError::MustUnderstand);
                }
                d.skip()?;
            }
            _ => return Err(SenmlError::FieldType("label")),
        }
    }
    Ok(r)
}

fn parse_field<'a>(d: &mut Decoder<'a>, r: &mut Record<'a>, key: i64) -> Result<(), SenmlError> {
    let num = |d: &mut Decoder<'a>, name| d.number().map_err(|_| SenmlError::FieldType(name));
    let txt = |d: &mut Decoder<'a>, name| d.text().map_err(|_| SenmlError::FieldType(name));
    match key {
        label::BVER => {
            let v = d.u64().map_err(|_| SenmlError::FieldType("bver"))?;
            if v > 10 {
                return Err(SenmlError::UnsupportedVersion);
            }
            set(&mut r.base_version, v)
        }
        label::BN => set(&mut r.base_name, txt(d, "bn")?),
        label::BT => set(&mut r.base_time, num(d, "bt")?),
        label::BU => set(&mut r.base_unit, txt(d, "bu")?),
        label::BV => set(&mut r.base_value, num(d, "bv")?),
        label::BS => set(&mut r.base_sum, num(d, "bs")?),
        label::N => set(&mut r.name, txt(d, "n")?),
        label::U => set(&mut r.unit, txt(d, "u")?),
        label::V => set(&mut r.value, Value::Number(num(d, "v")?)),
        label::VS => set(&mut r.value, Value::String(txt(d, "vs")?)),
        label::VB => set(
            &mut r.value,
            Value::Bool(d.bool().map_err(|_| SenmlError::FieldType("vb"))?),
        ),
        label::VD => set(
            &mut r.value,
            Value::Data(d.bytes().map_err(|_| SenmlError::FieldType("vd"))?),
        ),
        label::S => set(&mut r.sum, num(d, "s")?),
        label::T => set(&mut r.time, num(d, "t")?),
        label::UT => set(&mut r.update_time, num(d, "ut")?),
        _ => {
            d.skip()?;
            Ok(())
        }
    }
    .map_err(|e| {
        if e == SenmlError::DuplicateField && r.value.is_some() && matches!(key, 2 | 3 | 4 | 8) {
            SenmlError::BadValue
        } else {
            e
        }
    })
}

/// True if `name` satisfies RFC 8428 §4.5.1: starts with a letter or digit, then only
/// letters, digits, `-`, `:`, `.`, `/`, `_`.
pub fn valid_name(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-:./_".contains(c))
}

#[cfg(feature = "alloc")]
pub use owned::*;

#[cfg(feature = "alloc")]
mod owned {
    use super::*;
    use alloc::string::{String, ToString};
    use alloc::vec::Vec;

    /// A value after resolution, owning its data.
    #[derive(Clone, Debug, PartialEq)]
    pub enum OwnedValue {
        Number(f64),
        String(String),
        Bool(bool),
        Data(Vec<u8>),
    }

    /// A resolved record (RFC 8428 §4.6): base fields applied.
    #[derive(Clone, Debug, PartialEq)]
    pub struct Resolved {
        pub name: String,
        pub unit: Option<String>,
        pub value: Option<OwnedValue>,
        pub sum: Option<f64>,
        /// Absolute or relative time after adding the base time (seconds).
        pub time: f64,
    }

    /// Applies base values and checks §4.5: every resolved record has a valid name and a value
    /// or sum.
    pub fn resolve<'a>(
        records: impl IntoIterator<Item = Record<'a>>,
    ) -> Result<Vec<Resolved>, SenmlError> {
        let mut out = Vec::new();
        let (mut bn, mut bt, mut bu, mut bv, mut bs): (
            &str,
            f64,
            Option<&str>,
            Option<f64>,
            Option<f64>,
        ) = ("", 0.0, None, None, None);
        for r in records {
            if out.len() >= MAX_RECORDS {
                return Err(SenmlError::TooManyRecords);
            }
            r.check_numbers()?;
            if let Some(x) = r.base_name {
                bn = x;
            }
            if let Some(x) = r.base_time {
                bt = x;
            }
            if let Some(x) = r.base_unit {
                bu = Some(x);
            }
            if let Some(x) = r.base_value {
                bv = Some(x);
            }
            if let Some(x) = r.base_sum {
                bs = Some(x);
            }
            let mut name = String::from(bn);
            name.push_str(r.name.unwrap_or(""));
            if !valid_name(&name) {
                return Err(SenmlError::BadName);
            }
            let value = match (r.value, bv) {
                (Some(Value::Number(v)), b) => Some(OwnedValue::Number(v + b.unwrap_or(0.0))),
                (Some(Value::String(s)), _) => Some(OwnedValue::String(s.to_string())),
                (Some(Value::Bool(b)), _) => Some(OwnedValue::Bool(b)),
                (Some(Value::Data(d)), _) => Some(OwnedValue::Data(d.to_vec())),
                (None, Some(b)) => Some(OwnedValue::Number(b)),
                (None, None) => None,
            };
            let sum = match (r.sum, bs) {
                (Some(s), b) => Some(s + b.unwrap_or(0.0)),
                (None, b) => b,
            };
            if value.is_none() && sum.is_none() {
                return Err(SenmlError::BadValue);
            }
            out.push(Resolved {
                name,
                unit: r.unit.or(bu).map(|s| s.to_string()),
                value,
                sum,
                time: bt + r.time.unwrap_or(0.0),
            });
        }
        Ok(out)
    }

    /// An owned record decoded from SenML-JSON.
    #[derive(Clone, Debug, Default, PartialEq)]
    pub struct JsonRecord {
        pub base_name: Option<String>,
        pub base_unit: Option<String>,
        pub name: Option<String>,
        pub unit: Option<String>,
        pub string_value: Option<String>,
        pub data_value: Option<Vec<u8>>,
        pub base_time: Option<f64>,
        pub base_value: Option<f64>,
        pub base_sum: Option<f64>,
        pub base_version: Option<u64>,
        pub number_value: Option<f64>,
        pub bool_value: Option<bool>,
        pub sum: Option<f64>,
        pub time: Option<f64>,
        pub update_time: Option<f64>,
    }

    impl JsonRecord {
        pub fn as_record(&self) -> Record<'_> {
            Record {
                base_name: self.base_name.as_deref(),
                base_time: self.base_time,
                base_unit: self.base_unit.as_deref(),
                base_value: self.base_value,
                base_sum: self.base_sum,
                base_version: self.base_version,
                name: self.name.as_deref(),
                unit: self.unit.as_deref(),
                value: if let Some(v) = self.number_value {
                    Some(Value::Number(v))
                } else if let Some(s) = &self.string_value {
                    Some(Value::String(s))
                } else if let Some(b) = self.bool_value {
                    Some(Value::Bool(b))
                } else {
                    self.data_value.as_deref().map(Value::Data)
                },
                sum: self.sum,
                time: self.time,
                update_time: self.update_time,
            }
        }
    }

    /// Decodes a SenML-JSON pack (RFC 8428 §5).
    pub fn parse_json(text: &[u8]) -> Result<Vec<JsonRecord>, SenmlError> {
        use serde_json::Value as J;
        let v: J = serde_json::from_slice(text).map_err(|_| SenmlError::Json)?;
        let arr = v.as_array().ok_or(SenmlError::NotAPack)?;
        if arr.len() > MAX_RECORDS {
            return Err(SenmlError::TooManyRecords);
        }
        let mut out = Vec::with_capacity(arr.len());
        for rec in arr {
            let obj = rec.as_object().ok_or(SenmlError::NotAPack)?;
            let mut r = JsonRecord::default();
            let mut values = 0;
            for (k, val) in obj {
                let num = |n: &'static str| val.as_f64().ok_or(SenmlError::FieldType(n));
                let s = |n: &'static str| {
                    val.as_str()
                        .map(|x| x.to_string())
                        .ok_or(SenmlError::FieldType(n))
                };
                match k.as_str() {
                    "bn" => r.base_name = Some(s("bn")?),
                    "bt" => r.base_time = Some(num("bt")?),
                    "bu" => r.base_unit = Some(s("bu")?),
                    "bv" => r.base_value = Some(num("bv")?),
                    "bs" => r.base_sum = Some(num("bs")?),
                    "bver" => {
                        let v = val.as_u64().ok_or(SenmlError::FieldType("bver"))?;
                        if v > 10 {
                            return Err(SenmlError::UnsupportedVersion);
                        }
                        r.base_version = Some(v)
                    }
                    "n" => r.name = Some(s("n")?),
                    "u" => r.unit = Some(s("u")?),
                    "v" => {
                        values += 1;
                        r.number_value = Some(num("v")?)
                    }
                    "vs" => {
                        values += 1;
                        r.string_value = Some(s("vs")?)
                    }
                    "vb" => {
                        values += 1;
                        r.bool_value = Some(val.as_bool().ok_or(SenmlError::FieldType("vb"))?)
                    }
                    "vd" => {
                        values += 1;
                        use base64::Engine;
                        let text = val.as_str().ok_or(SenmlError::FieldType("vd"))?;
                        r.data_value = Some(
                            base64::engine::general_purpose::URL_SAFE_NO_PAD
                                .decode(text)
                                .map_err(|_| SenmlError::FieldType("vd"))?,
                        )
                    }
                    "s" => r.sum = Some(num("s")?),
                    "t" => r.time = Some(num("t")?),
                    "ut" => r.update_time = Some(num("ut")?),
                    other if other.ends_with('_') => return Err(SenmlError::MustUnderstand),
                    _ => {}
                }
            }
            if values > 1 {
                return Err(SenmlError::BadValue);
            }
            out.push(r);
        }
        Ok(out)
    }
}

impl core::error::Error for SenmlError {}
