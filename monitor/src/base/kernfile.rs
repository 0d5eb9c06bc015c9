//! Reading kernel files (cgroup files, /proc entries) the way a sampler must: the whole file from offset 0, with
//! `pread` on a file kept open, into a buffer that is reused.
//!
//! Two readers, by how the kernel makes the file:
//! - [`pread_record`] for a file the kernel writes in one piece (one `show` call: `/proc/<pid>/statm`, `stat`,
//!   `comm`, and every cgroup file but the pid lists): a read that comes back shorter than the buffer holds the
//!   whole file, so it takes one system call where reading to the end takes two;
//! - [`pread_all`] for a file of many records (`cgroup.procs`, `tasks`), which the kernel may hand out a page at a
//!   time: read until a read returns nothing.
//!
//! The sampler reads about twenty such files a sample; `cargo xtask bench agent-cpu` measures what that costs.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Reads a whole file from offset 0 with `pread` into `buf` (cleared first), until a read returns nothing. Kernel
/// files (kernfs, procfs seq files) re-generate their content on each read at offset 0, so an open file can be
/// sampled again and again.
pub fn pread_all(file: &File, buf: &mut Vec<u8>) -> std::io::Result<()> {
    read_from_zero(file, buf, false)
}

/// Reads a file the kernel writes in one piece from offset 0 into `buf` (cleared first): a read shorter than the
/// room given is the whole file. The kernel generates such a file whole at each read from 0 and copies out what
/// fits, so a short read means nothing is left; a full one is followed by more reads, as [`pread_all`] does.
/// Not for files of many records (`cgroup.procs`): the kernel may stop those at a page while more remain.
pub(crate) fn pread_record(file: &File, buf: &mut Vec<u8>) -> std::io::Result<()> {
    read_from_zero(file, buf, true)
}

/// Reads a whole `/proc` or cgroup file as text, any bytes that are not UTF-8 replaced: a process chooses its own
/// name (`prctl(PR_SET_NAME)`, any bytes), and a name must never make its process unreadable to the guard.
pub fn read_lossy(path: impl AsRef<std::path::Path>) -> std::io::Result<String> {
    let bytes = std::fs::read(path)?;
    Ok(match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

fn read_from_zero(file: &File, buf: &mut Vec<u8>, short_is_whole: bool) -> std::io::Result<()> {
    buf.clear();
    if buf.capacity() < 4096 {
        buf.reserve(4096);
    }
    loop {
        let len = buf.len();
        if buf.capacity() == len {
            buf.reserve(len);
        }
        let room = buf.capacity() - len;
        buf.resize(len + room, 0);
        let n = match file.read_at(&mut buf[len..], len as u64) {
            Ok(n) => n,
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        };
        buf.truncate(len + n);
        if n == 0 || (short_is_whole && n < room) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both readers give the same bytes for a regular file larger than the first buffer, and for an empty one.
    #[test]
    fn a_file_longer_than_the_buffer_is_read_whole_by_both() {
        let dir = std::env::temp_dir().join(format!("kernfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let text: Vec<u8> = (0..20_000u32).map(|i| b'a' + (i % 26) as u8).collect();
        for (name, content) in [("long", &text[..]), ("empty", &[][..]), ("page", &text[..4096])] {
            let path = dir.join(name);
            std::fs::write(&path, content).expect("write");
            let f = File::open(&path).expect("open");
            let (mut a, mut b) = (Vec::new(), Vec::new());
            pread_all(&f, &mut a).expect("pread_all");
            pread_record(&f, &mut b).expect("pread_record");
            assert_eq!((a.len(), b.len()), (content.len(), content.len()), "{name}");
            assert!(a == content && b == content, "{name}");
        }
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    /// On real kernel files of one piece, one read gives what reading to the end gives.
    #[test]
    fn kernel_files_of_one_piece_read_alike_both_ways() {
        for path in ["/proc/self/statm", "/proc/self/stat", "/proc/self/comm", "/proc/meminfo"] {
            let f = File::open(path).expect(path);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            pread_record(&f, &mut b).expect(path);
            pread_all(&f, &mut a).expect(path);
            assert!(!b.is_empty() && b.ends_with(b"\n"), "{path}: {:?}", String::from_utf8_lossy(&b));
            // statm and stat change between two reads; their number of fields does not.
            let fields = |v: &[u8]| String::from_utf8_lossy(v).split_whitespace().count();
            assert_eq!(fields(&a), fields(&b), "{path}");
        }
    }
}
