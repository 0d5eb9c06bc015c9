//! `FILTER`: the tgids whose traffic is traced, as a bitmap (an array of u64 words, bit `tgid % 64` of word
//! `tgid / 64`). User space keeps it equal to the group's processes; the kernel only reads it. An array lookup
//! is inlined by the verifier, so the check every hooked syscall of every process pays stays a few
//! nanoseconds.

/// Name of the map in the object.
pub const MAP: &str = "FILTER";
/// Words in the object's map: enough for the default 64-bit `pid_max` (4194304). User space resizes it at load
/// time from `/proc/sys/kernel/pid_max`.
pub const MAX_ENTRIES: u32 = 4_194_304 / 64;

/// The word index and bit mask of a tgid.
#[inline(always)]
pub fn slot(tgid: u32) -> (u32, u64) {
    (tgid / 64, 1u64 << (tgid % 64))
}

/// Words needed for tgids below `pid_max`.
pub fn words(pid_max: u32) -> u32 {
    pid_max.div_ceil(64).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots() {
        assert_eq!(slot(0), (0, 1));
        assert_eq!(slot(63), (0, 1 << 63));
        assert_eq!(slot(64), (1, 1));
        assert_eq!(slot(4_194_303), (65_535, 1 << 63));
        assert_eq!(words(4_194_304), 65_536);
        assert_eq!(words(32_768), 512);
        assert_eq!(words(65), 2);
    }
}
