//! Thin wrappers over the NUMA memory-policy system calls that neither libc nor nix wrap:
//! `mbind` and `move_pages`.
//!
//! Node ids are validated by the caller against sysfs before they get here, because the kernel's
//! EINVAL does not say which argument was wrong.

use std::io;

/// `MPOL_MF_STRICT`: fail if existing pages do not follow the policy.
const MPOL_MF_STRICT: libc::c_uint = 1;
/// `MPOL_MF_MOVE`: move existing pages of this process to follow the policy.
const MPOL_MF_MOVE: libc::c_uint = 2;
/// Nodes a mask can name; 1024 covers every shipping kernel's `MAX_NUMNODES`.
const MASK_WORDS: usize = 16;

fn node_mask(node: u32) -> io::Result<[libc::c_ulong; MASK_WORDS]> {
    let bits = libc::c_ulong::BITS;
    let word = (node / bits) as usize;
    if word >= MASK_WORDS {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut mask = [0; MASK_WORDS];
    mask[word] = 1 << (node % bits);
    Ok(mask)
}

/// Binds `len` bytes at `addr` to `node` with `MPOL_BIND`, moving pages already present.
///
/// # Safety
/// `addr..addr+len` must be a page-aligned mapping owned by the caller.
pub(crate) unsafe fn bind_to_node(addr: *mut u8, len: usize, node: u32) -> io::Result<()> {
    let mask = node_mask(node)?;
    let max_node = (MASK_WORDS as libc::c_ulong) * libc::c_ulong::from(libc::c_ulong::BITS);
    // SAFETY: the caller guarantees the range is a mapping it owns; `mask` outlives the call and
    // holds `max_node` bits.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            addr,
            len,
            libc::MPOL_BIND,
            mask.as_ptr(),
            max_node,
            MPOL_MF_STRICT | MPOL_MF_MOVE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Where each page in `pages` lives, by `move_pages(0, .., NULL, status)` (query mode): each
/// status is the page's node, or a negative errno (`-ENOENT`: not faulted in).
///
/// # Safety
/// Every pointer in `pages` must point into a mapping of this process.
pub(crate) unsafe fn nodes_of_pages(
    pages: &[*const u8],
    status: &mut [libc::c_int],
) -> io::Result<()> {
    if pages.len() != status.len() {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: `pages` and `status` have the same length, a null `nodes` asks for a query only,
    // and the caller guarantees the addresses are mapped.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0 as libc::pid_t,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            std::ptr::null::<libc::c_int>(),
            status.as_mut_ptr(),
            0 as libc::c_int,
        )
    };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_mask_sets_one_bit() {
        let m = node_mask(0).unwrap();
        assert_eq!(m[0], 1);
        let m = node_mask(65).unwrap();
        assert_eq!(m[1], 2);
        assert!(node_mask(5000).is_err());
    }
}
