//! Reading kernel files (cgroup files, /proc entries) the way a sampler must: the whole file from offset 0, with
//! `pread` on a file kept open, into a buffer that is reused.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Reads a whole file from offset 0 with `pread` into `buf` (cleared first). Kernel files (kernfs, procfs
/// seq files) re-generate their content on each read at offset 0, so an open file can be sampled again and again.
pub fn pread_all(file: &File, buf: &mut Vec<u8>) -> std::io::Result<()> {
    buf.clear();
    if buf.capacity() < 4096 {
        buf.reserve(4096);
    }
    loop {
        let len = buf.len();
        if buf.capacity() == len {
            buf.reserve(len);
        }
        let spare = buf.capacity() - len;
        buf.resize(len + spare, 0);
        let n = match file.read_at(&mut buf[len..], len as u64) {
            Ok(n) => n,
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        };
        buf.truncate(len + n);
        if n == 0 {
            return Ok(());
        }
    }
}
