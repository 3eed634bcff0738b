//! Reading C arguments: every pointer is checked before it becomes a slice.

use crate::status::sigil_status::{self, *};
use core::ffi::c_char;

pub(crate) type CResult<T = ()> = Result<T, sigil_status>;

/// The status of an exported call.
pub(crate) fn status(r: CResult) -> sigil_status {
    match r {
        Ok(()) => SIGIL_OK,
        Err(e) => e,
    }
}

/// An input buffer: NULL is allowed only with length 0.
pub(crate) unsafe fn input<'a>(ptr: *const u8, len: usize) -> CResult<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if ptr.is_null() {
        return Err(SIGIL_ERR_NULL);
    }
    if len > isize::MAX as usize {
        return Err(SIGIL_ERR_BAD_LENGTH);
    }
    // SAFETY: the caller promises `len` readable bytes at `ptr` (the C contract).
    Ok(unsafe { core::slice::from_raw_parts(ptr, len) })
}

/// A required input buffer of `min` to `max` bytes: NULL is refused whatever the length.
pub(crate) unsafe fn required<'a>(
    ptr: *const u8,
    len: usize,
    min: usize,
    max: usize,
) -> CResult<&'a [u8]> {
    if ptr.is_null() {
        return Err(SIGIL_ERR_NULL);
    }
    if len < min || len > max {
        return Err(SIGIL_ERR_BAD_LENGTH);
    }
    unsafe { input(ptr, len) }
}

/// The first `need` bytes of an output buffer of `cap` bytes.
pub(crate) unsafe fn output<'a>(ptr: *mut u8, cap: usize, need: usize) -> CResult<&'a mut [u8]> {
    if ptr.is_null() {
        return Err(SIGIL_ERR_NULL);
    }
    if cap < need {
        return Err(SIGIL_ERR_SHORT_BUFFER);
    }
    // SAFETY: the caller promises `cap` writable bytes at `ptr`, and `need <= cap`.
    Ok(unsafe { core::slice::from_raw_parts_mut(ptr, need) })
}

/// A required pointer.
pub(crate) unsafe fn reference<'a, T>(ptr: *const T) -> CResult<&'a T> {
    // SAFETY: non-NULL pointers from C point to a valid, aligned `T` (the C contract).
    unsafe { ptr.as_ref() }.ok_or(SIGIL_ERR_NULL)
}

/// A required output pointer.
pub(crate) unsafe fn out<'a, T>(ptr: *mut T) -> CResult<&'a mut T> {
    // SAFETY: as for `reference`.
    unsafe { ptr.as_mut() }.ok_or(SIGIL_ERR_NULL)
}

/// An optional output pointer (NULL: the caller does not want the value).
pub(crate) unsafe fn write_opt<T>(ptr: *mut T, value: T) {
    if !ptr.is_null() {
        // SAFETY: as for `reference`.
        unsafe { ptr.write(value) }
    }
}

/// A NUL-terminated UTF-8 string of at most `max` bytes; NULL is `None`.
pub(crate) unsafe fn c_str<'a>(ptr: *const c_char, max: usize) -> CResult<Option<&'a str>> {
    if ptr.is_null() {
        return Ok(None);
    }
    let mut n = 0;
    // SAFETY: the caller promises a NUL-terminated string; we stop at the NUL or past `max`.
    while unsafe { *ptr.add(n) } != 0 {
        n += 1;
        if n > max {
            return Err(SIGIL_ERR_BAD_LENGTH);
        }
    }
    // SAFETY: the `n` bytes before the NUL were just read.
    let bytes = unsafe { core::slice::from_raw_parts(ptr.cast::<u8>(), n) };
    core::str::from_utf8(bytes)
        .map(Some)
        .map_err(|_| SIGIL_ERR_BAD_ARGUMENT)
}

/// Writes `text` and a NUL into `out` (`cap` bytes).
pub(crate) unsafe fn write_c_str(out: *mut c_char, cap: usize, text: &[u8]) -> CResult {
    let buf = unsafe { output(out.cast::<u8>(), cap, text.len() + 1) }?;
    buf[..text.len()].copy_from_slice(text);
    buf[text.len()] = 0;
    Ok(())
}

/// A state the library writes into caller memory: `repr(C)` with a `magic: u64` first field
/// that says the memory holds a live `Self` (written when the state is made, cleared when it
/// ends). Each implementor asserts at compile time that its header type is large and aligned
/// enough for it.
pub(crate) trait Tagged {
    /// The first field's value while the state is live.
    const MAGIC: u64;
    /// The status for memory that does not hold a live state.
    const NOT_LIVE: sigil_status;
}

/// The live state behind the caller's pointer `p` (to the header type that holds an `S`).
///
/// # Safety
/// `p` is NULL or points to memory of the header type's size and alignment, as the C
/// contract says.
unsafe fn live<S: Tagged>(p: *const u8) -> CResult<*mut S> {
    if p.is_null() {
        return Err(SIGIL_ERR_NULL);
    }
    // SAFETY: the memory is the caller's header type, large and aligned enough for `S`
    // (asserted beside each `S`), whose first field is the `u64` magic (`repr(C)`), read as
    // plain bytes whatever they hold.
    let magic = unsafe { p.cast::<u64>().read() };
    if magic != S::MAGIC {
        return Err(S::NOT_LIVE);
    }
    Ok(p.cast::<S>().cast_mut())
}

/// The live state behind `p`, to change.
///
/// # Safety
/// As for [`live`]; and no other reference to the state exists for `'a`.
pub(crate) unsafe fn live_mut<'a, S: Tagged, H>(p: *mut H) -> CResult<&'a mut S> {
    // SAFETY: the magic says an `S` was written here and not ended.
    Ok(unsafe { &mut *live::<S>(p.cast::<u8>().cast_const())? })
}

/// The live state behind `p`, to read.
///
/// # Safety
/// As for [`live`]; and no mutable reference to the state exists for `'a`.
pub(crate) unsafe fn live_ref<'a, S: Tagged, H>(p: *const H) -> CResult<&'a S> {
    // SAFETY: as for `live_mut`; only read.
    Ok(unsafe { &*live::<S>(p.cast::<u8>())? })
}
