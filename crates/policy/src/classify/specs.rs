//! What the classifier knows of each program's options, as data.
//!
//! Each option is one token, `NAMES[=|=?][:EFFECT]`:
//! - `NAMES` are comma-separated; a one-character name is a short option (`-o`), a longer one a
//!   long option (`--output`).
//! - `=` takes a value, attached (`-oFILE`, `--output=FILE`) or as the next word; `=?` takes an
//!   optional value, attached only (`-i.bak`, `--in-place=.bak`), as getopt's `::` does.
//! - `EFFECT` is what the option does beyond changing how the program reads (see `Effect`).
//!
//! Long options may be abbreviated to any unambiguous prefix, as getopt_long allows, unless the
//! program says otherwise. An option a program's spec does not list makes the command
//! `ShellComplex` (the list may lag behind the program), unless the spec says unknown options
//! are harmless.

use std::collections::HashMap;
use std::sync::OnceLock;

/// What a program does with its operands (the words that are not options).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operands {
    /// Reads them.
    Read,
    /// Writes each of them (touch, mkdir, tee).
    Written,
    /// Empties each of them (truncate): as bad as deleting them.
    Emptied,
    /// Deletes each of them (rm, rmdir, shred, unlink); recursively with a `recursive` option.
    Deleted,
    /// Deletes each of them and all they hold, always (rimraf, trash-put).
    DeletedTrees,
    /// Copies or links the sources to the last operand (cp, mv, install, ln).
    Copied,
    /// A mode or owner first, then the files it changes (chmod, chown, chgrp).
    Changed,
    /// Rewrites each of them in place, past the first `leading` (sd's FIND and REPLACE): always
    /// (`always`) unless a `query` option asks only to check, or only with an `inplace` option
    /// (`gofmt -w`).
    Rewritten { leading: usize, always: bool },
    /// A command to run, with its own arguments: how it is found is the spec's `Runs`
    /// (`runners`).
    Command,
    /// The program's own module reads them (sed, git, tar, uniq...).
    Own,
}

/// What an option does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Effect {
    /// Changes only how the program reads or prints.
    Plain,
    /// Its value is a path the program writes.
    Write,
    /// Runs a program or code the classifier does not see.
    Run,
    /// Its value is a command the program runs (`tar --to-command=CMD`, `split --filter=CMD`,
    /// `rsync -e CMD`): read as shell code.
    Command,
    /// Its value is an action, and `exec=CMD` runs CMD (`tar --checkpoint-action`).
    Action,
    /// Makes the program change files or the system.
    Mutate,
    /// Makes a delete, chmod or chown recursive.
    Recursive,
    /// Removes a guard against destroying `/`.
    Unguard,
    /// Asks about the command, or acts on another process, instead of running one
    /// (`command -v`, `taskset -p`).
    Query,
    /// Its value is shell code the program runs (`su -c CODE`).
    Code,
    /// Its value is split into the command's first words (`env -S 'CMD ARGS'`).
    Split,
    /// The command runs in the directory its value names (`env -C DIR`).
    Chdir,
    /// The command runs with the directory its value names as `/` (`unshare -R DIR`).
    Root,
    /// The command runs in a login session, in the user's home (`su -l`).
    Login,
    /// The command runs through a shell; with none, the shell reads its input (`sudo -s`).
    Shell,
    /// The operands are files it edits (`sudo -e`).
    Edit,
    /// Makes the program rewrite its operands in place (`gofmt -w`).
    InPlace,
}

/// Operands of a runner before its command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Before {
    /// The command is the first operand.
    Nothing,
    /// This many operands come first (timeout's DURATION, flock's FILE).
    Skip(usize),
    /// The first operand may be a value or the command (chrt's priority, runcon's context):
    /// both readings are taken.
    Maybe,
    /// The first operand is the command's root directory (chroot's NEWROOT).
    Root,
}

/// What a runner's operands after `Before` are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    /// A program and its arguments.
    Command,
    /// Arguments of a shell (su USER ARGS: the shell runs ARGS as a script).
    ShellArgs,
    /// Words joined and run as shell code, unless the named option is given (watch, sg).
    Joined(Option<&'static str>),
    /// Files it writes; the command comes from an option (script FILE -c CODE).
    Files(&'static str),
}

/// How a program that runs its arguments finds what it runs.
#[derive(Debug, Clone, Copy)]
pub(super) struct Runs {
    pub(super) before: Before,
    pub(super) shape: Shape,
    /// Given no command, it runs a shell on its input (unshare, chroot, su).
    pub(super) bare_shell: bool,
    /// An option that makes the operands a command instead of shell arguments (runuser -u).
    pub(super) command_with: Option<&'static str>,
    /// Words right after `before` that make the next word shell code (flock FILE -c CODE).
    pub(super) code_after: &'static [&'static str],
    /// A lone `-` before the command stands for this option (env's -i, su's --login).
    pub(super) dash: Option<&'static str>,
    /// NAME=VALUE operands before the command set its environment (env).
    pub(super) assignments: bool,
    /// Runs its command as another user, in other namespaces, another root or a service:
    /// at least `ShellComplex`, whatever the command.
    pub(super) elsewhere: bool,
}

/// A runner that takes options and then a program and its arguments.
pub(super) const RUNS: Runs = Runs {
    before: Before::Nothing,
    shape: Shape::Command,
    bare_shell: false,
    command_with: None,
    code_after: &[],
    dash: None,
    assignments: false,
    elsewhere: false,
};

/// One option of a program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Opt {
    pub(super) short: Vec<char>,
    pub(super) long: Vec<&'static str>,
    pub(super) takes: Takes,
    pub(super) effect: Effect,
}

impl Opt {
    /// The first long name, else the short one.
    #[cfg(test)]
    pub(super) fn name(&self) -> String {
        match self.long.first() {
            Some(l) => (*l).to_string(),
            None => self
                .short
                .first()
                .map(|c| c.to_string())
                .unwrap_or_default(),
        }
    }
}

/// Whether an option takes a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Takes {
    Nothing,
    /// Attached or the next word.
    Value,
    /// Attached only, and optional.
    Attached,
}

/// A program's spec as written in `SPECS` and `runners::RUNNERS`.
pub(super) struct RawSpec {
    pub(super) names: &'static [&'static str],
    pub(super) operands: Operands,
    /// Options end at the first operand (getopt's `+`): the operands are a command.
    pub(super) stop_at_operand: bool,
    /// Long options may be abbreviated.
    pub(super) abbreviate: bool,
    /// Options the spec does not list are harmless (the program has many, none of them write).
    pub(super) unknown_harmless: bool,
    /// A first word without a dash is a bundle of short options whose values follow in order
    /// (`tar xfC a.tar dir`).
    pub(super) bundled_first: bool,
    pub(super) options: &'static str,
    /// For a runner, how it finds what it runs.
    pub(super) runs: Option<Runs>,
}

/// A program's spec, compiled.
#[derive(Debug)]
pub(super) struct Spec {
    pub(super) operands: Operands,
    pub(super) stop_at_operand: bool,
    pub(super) abbreviate: bool,
    pub(super) unknown_harmless: bool,
    pub(super) bundled_first: bool,
    pub(super) options: Vec<Opt>,
    pub(super) runs: Option<Runs>,
}

pub(super) const fn spec(
    names: &'static [&'static str],
    operands: Operands,
    options: &'static str,
) -> RawSpec {
    RawSpec {
        names,
        operands,
        stop_at_operand: false,
        abbreviate: true,
        unknown_harmless: false,
        bundled_first: false,
        options,
        runs: None,
    }
}

/// A runner: options, then what `runs` says (by default a program and its arguments).
pub(super) const fn runner(
    names: &'static [&'static str],
    options: &'static str,
    runs: Runs,
) -> RawSpec {
    RawSpec {
        stop_at_operand: true,
        runs: Some(runs),
        ..spec(names, Operands::Command, options)
    }
}

const COMMON: &str = "help version";

/// The programs whose options matter. `Operands::Own` programs are read by their own module.
const SPECS: &[RawSpec] = &[
    // Readers with an option that writes or runs.
    spec(
        &["sort"],
        Operands::Read,
        "b,ignore-leading-blanks c C check=? d,dictionary-order f,ignore-case \
         g,general-numeric-sort h,human-numeric-sort i,ignore-nonprinting k,key= M,month-sort \
         m,merge n,numeric-sort o,output=:write R,random-sort r,reverse s,stable S,buffer-size= \
         t,field-separator= T,temporary-directory= u,unique V,version-sort z,zero-terminated \
         batch-size= compress-program=:command debug files0-from= parallel= random-source= sort=",
    ),
    spec(
        &["date"],
        Operands::Read,
        "d,date= debug f,file= I,iso-8601=? R,rfc-email rfc-3339= resolution r,reference= \
         s,set=:mutate u,utc,universal",
    ),
    spec(
        &["file"],
        Operands::Read,
        "apple b,brief C,compile:mutate c,checking-printout d debug e,exclude= exclude-quiet= E \
         extension F,separator= f,files-from= h,no-dereference i,mime mime-type mime-encoding \
         k,keep-going l,list L,dereference m,magic-file= n,no-buffer N,no-pad p,preserve-date \
         P,parameter= r,raw s,special-files S,no-sandbox z,uncompress Z,uncompress-noreport \
         0,print0",
    ),
    RawSpec {
        // fd (Debian's fdfind) finds names; -x and -X run a command for what it finds. clap
        // does not abbreviate.
        abbreviate: false,
        ..spec(
            &["fd", "fdfind"],
            Operands::Read,
            "H,hidden I,no-ignore u,unrestricted no-ignore-vcs no-ignore-parent \
             s,case-sensitive i,ignore-case g,glob regex F,fixed-strings a,absolute-path \
             l,list-details L,follow p,full-path 0,print0 d,max-depth= min-depth= exact-depth= \
             E,exclude= prune t,type= e,extension= S,size= changed-within= changed-before= \
             o,owner= format= x,exec:run X,exec-batch:run batch-size= ignore-file= c,color= \
             j,threads= max-results= 1 q,quiet show-errors base-directory= path-separator= \
             search-path= strip-cwd-prefix=? one-file-system h,help V,version",
        )
    },
    RawSpec {
        // ripgrep's options are many and read-only but for these; clap does not abbreviate.
        abbreviate: false,
        unknown_harmless: true,
        ..spec(
            &["rg"],
            Operands::Read,
            "e,regexp= f,file= g,glob= iglob= t,type= T,type-not= type-add= type-clear= \
             m,max-count= A,after-context= B,before-context= C,context= M,max-columns= \
             j,threads= E,encoding= pre=:command pre-glob=:run max-depth= max-filesize= \
             path-separator= r,replace= colors= sort= sortr= context-separator= \
             field-context-separator= field-match-separator= dfa-size-limit= regex-size-limit= \
             engine= ignore-file= hostname-bin=:command hyperlink-format= generate=",
        )
    },
    // Writers.
    spec(
        &["tee"],
        Operands::Written,
        "a,append i,ignore-interrupts p output-error=?",
    ),
    spec(
        &["touch"],
        Operands::Written,
        "a c,no-create d,date= f h,no-dereference m r,reference= t= time=",
    ),
    spec(
        &["mkdir"],
        Operands::Written,
        "m,mode= p,parents v,verbose Z context=?",
    ),
    spec(&["mkfifo"], Operands::Written, "m,mode= Z context=?"),
    spec(
        &["scp"],
        Operands::Copied,
        "1 2 3 4 6 A B C O p q r R T v c= D= F= i= J= l= o= P= S= X=",
    ),
    RawSpec {
        // 7z's switches are `-oDIR`, `-tzip`...: read by its own reader.
        unknown_harmless: true,
        ..spec(&["7z", "7za", "7zr"], Operands::Own, "")
    },
    RawSpec {
        unknown_harmless: true,
        ..spec(
            &["cpio"],
            Operands::Own,
            "i,extract o,create p,pass-through t,list:query D,directory= d,make-directories \
             F,file= O= I= H,format= E,pattern-file= R,owner= to-stdout:query",
        )
    },
    RawSpec {
        unknown_harmless: true,
        ..spec(&["ar"], Operands::Own, "")
    },
    spec(&["sponge"], Operands::Written, "a"),
    spec(
        &["shuf"],
        Operands::Read,
        "o,output=:write e,echo i,input-range= n,head-count= random-source= r,repeat \
         z,zero-terminated",
    ),
    spec(
        &["iconv"],
        Operands::Read,
        "f,from-code= t,to-code= l,list c o,output=:write s,silent verbose",
    ),
    RawSpec {
        // tree's options are single letters and single-dash words, read as flags but these.
        unknown_harmless: true,
        abbreviate: false,
        ..spec(
            &["tree"],
            Operands::Read,
            "o=:write L= P= I= H= T= charset= filelimit= timefmt= sort= gitfile= infofile=",
        )
    },
    RawSpec {
        // The compressors share these options; others are read as flags.
        unknown_harmless: true,
        ..spec(
            &[
                "gzip", "gunzip", "zcat", "pigz", "unpigz", "bzip2", "bunzip2", "bzcat", "xz",
                "unxz", "xzcat", "lzma", "unlzma", "lzcat", "zstd", "unzstd", "zstdcat", "lz4",
                "lz4cat",
            ],
            Operands::Own,
            "c,stdout,to-stdout:query d,decompress,uncompress k,keep f,force t,test:query \
             l,list:query r,recursive S,suffix= n,no-name N,name q,quiet v,verbose T,threads= \
             F,format= C,check= M,memlimit= files= files0= o=:write rm:mutate D= \
             output-dir-flat=:write output-dir-mirror=:write b,blocking=",
        )
    },
    spec(
        &["split"],
        Operands::Own,
        "a,suffix-length= additional-suffix= b,bytes= C,line-bytes= d numeric-suffixes=? x \
         hex-suffixes=? e,elide-empty-files filter=:command l,lines= n,number= t,separator= \
         u,unbuffered verbose 0 1 2 3 4 5 6 7 8 9",
    ),
    spec(
        &["csplit"],
        Operands::Own,
        "f,prefix= b,suffix-format= k,keep-files suppress-matched n,digits= s,q,quiet,silent \
         z,elide-empty-files",
    ),
    RawSpec {
        // Downloaders have hundreds of options; these take values or write files.
        unknown_harmless: true,
        ..spec(
            &["curl"],
            Operands::Own,
            "o,output= O,remote-name remote-name-all output-dir= D,dump-header=:write \
             c,cookie-jar=:write trace=:write trace-ascii=:write stderr=:write libcurl=:write \
             etag-save=:write K,config=:run d,data= H,header= X,request= u,user= A,user-agent= \
             e,referer= b,cookie= F,form= T,upload-file= x,proxy= m,max-time= w,write-out= \
             r,range= Y,speed-limit= y,speed-time= z,time-cond= E,cert= C,continue-at= \
             data-binary= data-raw= data-urlencode= json= url= connect-timeout= retry= cacert= \
             capath= key= resolve= interface= limit-rate= max-filesize= proxy-user= \
             oauth2-bearer= aws-sigv4= unix-socket= abstract-unix-socket= create-dirs \
             J,remote-header-name",
        )
    },
    RawSpec {
        unknown_harmless: true,
        ..spec(
            &["wget"],
            Operands::Own,
            "O,output-document= o,output-file=:write a,append-output=:write \
             P,directory-prefix= e,execute=:run i,input-file= B,base= config=:run \
             U,user-agent= header= post-data= post-file= body-data= body-file= user= password= \
             t,tries= T,timeout= w,wait= Q,quota= limit-rate= load-cookies= \
             save-cookies=:write warc-file=:write l,level= A,accept= R,reject= D,domains= \
             I,include-directories= X,exclude-directories= ca-certificate= certificate= \
             private-key= use-askpass=:command r,recursive m,mirror",
        )
    },
    RawSpec {
        // Builders: what matters is the makefile and the directory; other options are read
        // as harmless flags.
        unknown_harmless: true,
        ..spec(
            &["make", "gmake", "ninja"],
            Operands::Own,
            "f,file,makefile= C,directory= I,include-dir= j,jobs=? l,load-average=? \
             o,old-file,assume-old= W,what-if,new-file,assume-new= eval=:run O,output-sync=? \
             debug=? shuffle=? t,tool=",
        )
    },
    spec(&["link"], Operands::Copied, ""),
    spec(&["mknod"], Operands::Own, "m,mode= Z context=?"),
    spec(
        &["truncate"],
        Operands::Emptied,
        "c,no-create o,io-blocks r,reference= s,size=",
    ),
    spec(
        &["rmdir"],
        Operands::Deleted,
        "ignore-fail-on-non-empty p,parents v,verbose",
    ),
    spec(
        &["shred"],
        Operands::Deleted,
        "f,force n,iterations= random-source= s,size= u remove=? v,verbose x,exact z,zero",
    ),
    spec(&["unlink"], Operands::Deleted, ""),
    spec(
        &["rimraf"],
        Operands::DeletedTrees,
        "G,no-glob glob v,verbose i,interactive preserve-root no-preserve-root:unguard impl=",
    ),
    spec(
        &["trash-put", "trash"],
        Operands::DeletedTrees,
        "d,directory f,force i,interactive r,R,recursive trash-dir= v,verbose",
    ),
    spec(
        &["rm"],
        Operands::Deleted,
        "f,force i I interactive=? one-file-system no-preserve-root:unguard preserve-root=? \
         r,R,recursive:recursive d,dir v,verbose",
    ),
    spec(
        &["cp"],
        Operands::Copied,
        "a,archive attributes-only backup=? b copy-contents d debug f,force i,interactive H \
         l,link L,dereference n,no-clobber P,no-dereference p preserve=? no-preserve= parents \
         R,r,recursive reflink=? remove-destination sparse= strip-trailing-slashes \
         s,symbolic-link S,suffix= t,target-directory=:write T,no-target-directory u update=? \
         v,verbose x,one-file-system Z context=? keep-directory-symlink",
    ),
    spec(
        &["mv"],
        Operands::Copied,
        "backup=? b debug exchange f,force i,interactive n,no-clobber no-copy \
         strip-trailing-slashes S,suffix= t,target-directory=:write T,no-target-directory u \
         update=? v,verbose Z,context",
    ),
    spec(
        &["install"],
        Operands::Copied,
        "backup=? b c C,compare d,directory D g,group= m,mode= o,owner= p,preserve-timestamps \
         s,strip strip-program=:command S,suffix= t,target-directory=:write T,no-target-directory \
         v,verbose preserve-context Z context=? debug",
    ),
    spec(
        &["ln"],
        Operands::Copied,
        "backup=? b d,F,directory f,force i,interactive L,logical n,no-dereference P,physical \
         r,relative s,symbolic S,suffix= t,target-directory=:write T,no-target-directory \
         v,verbose",
    ),
    spec(
        &["chmod"],
        Operands::Changed,
        "c,changes f,silent,quiet v,verbose no-preserve-root:unguard preserve-root reference= \
         R,recursive:recursive",
    ),
    spec(
        &["chown", "chgrp"],
        Operands::Changed,
        "c,changes f,silent,quiet v,verbose dereference h,no-dereference from= \
         no-preserve-root:unguard preserve-root reference= R,recursive:recursive H L P",
    ),
    // Programs read by their own module.
    spec(
        &["sed"],
        Operands::Own,
        "n,quiet,silent debug e,expression= f,file=:run follow-symlinks i,in-place=?:mutate \
         l,line-length= posix E,r,regexp-extended s,separate sandbox u,unbuffered \
         z,null-data,zero-terminated b,binary",
    ),
    RawSpec {
        // awk's options end at its program; gawk's many others change only how it reads.
        stop_at_operand: true,
        unknown_harmless: true,
        ..spec(
            &["awk", "gawk", "mawk", "nawk"],
            Operands::Own,
            "F,field-separator= v,assign= f,file= e,source= i,include= E,exec= l,load= W= \
             D,debug=? S,sandbox d,dump-variables=? o,pretty-print=? p,profile=? L,lint=?",
        )
    },
    spec(
        // unzip's one-letter options mix with its operands; names after `-x` are left out.
        &["unzip"],
        Operands::Own,
        "d= P= O= I= l:query t:query p:query c:query z:query Z:query x a b B C D f F j J K L M \
         n N o q s T u U v V W X $ ^ 2",
    ),
    spec(
        &["uniq"],
        Operands::Own,
        "c,count d,repeated D all-repeated=? f,skip-fields= group=? i,ignore-case \
         s,skip-chars= u,unique z,zero-terminated w,check-chars=",
    ),
    spec(
        &["patch"],
        Operands::Own,
        "b,backup backup-if-mismatch no-backup-if-mismatch B,prefix= binary c,context \
         d,directory= D,ifdef= dry-run e,ed E,remove-empty-files f,force F,fuzz= g,get= \
         i,input= l,ignore-whitespace merge=? n,normal N,forward o,output=:write p,strip= \
         posix quoting-style= r,reject-file=:write R,reverse read-only= reject-format= \
         s,quiet,silent t,batch T,set-time u,unified v V,version-control= verbose \
         Y,basename-prefix= z,suffix= Z,set-utc x,debug= follow-symlinks",
    ),
    spec(
        // zip's two-letter options (`-FF`, `-sf`) read as clusters of its one-letter ones.
        &["zip"],
        Operands::Own,
        "a,ascii A,adjust-sfx b,temp-path= c,entry-comments C,preserve-case d,delete:mutate \
         D,no-dir-entries e,encrypt E,longnames f,freshen F,fix g,grow H i,include j,junk-paths \
         J,junk-sfx k,DOS-names l,to-crlf L,license m,move:mutate M,must-match n,suffixes= \
         o,latest-time O,output-file=:write p,paths P,password= q,quiet r,recurse-paths \
         R,recurse-patterns s,split-size= S,system-hidden t,from-date= T,test u,update \
         U,copy-entries v,verbose V,VMS-portable w,VMS-versions X,no-extra x,exclude y,symlinks \
         z,archive-comment Z,compression-method= 0 1 2 3 4 5 6 7 8 9 @,names-stdin \
         unzip-command=:command",
    ),
    spec(
        // `--delete` and its kin are marked `recursive`: they empty what of DEST the sources
        // lack.
        &["rsync"],
        Operands::Own,
        "v,verbose info= debug= stderr= q,quiet no-motd c,checksum a,archive r,recursive \
         no-recursive no-r R,relative no-implied-dirs b,backup backup-dir=:write suffix= \
         u,update inplace append append-verify d,dirs mkpath l,links L,copy-links \
         copy-unsafe-links safe-links munge-links k,copy-dirlinks K,keep-dirlinks H,hard-links \
         p,perms no-perms E,executability chmod= A,acls X,xattrs o,owner no-owner g,group \
         no-group devices copy-devices write-devices specials D t,times no-times U,atimes \
         open-noatime N,crtimes O,omit-dir-times J,omit-link-times super fake-super S,sparse \
         preallocate n,dry-run W,whole-file no-whole-file checksum-choice= cc= \
         x,one-file-system B,block-size= e,rsh=:command rsync-path=:command existing \
         ignore-existing remove-source-files:mutate del:recursive delete:recursive \
         delete-before:recursive delete-during:recursive delete-delay:recursive \
         delete-after:recursive delete-excluded:recursive ignore-missing-args \
         delete-missing-args:recursive ignore-errors force max-delete= max-size= min-size= \
         max-alloc= partial partial-dir=:write delay-updates m,prune-empty-dirs numeric-ids \
         usermap= groupmap= chown= timeout= contimeout= I,ignore-times size-only \
         modify-window= T,temp-dir=:write y,fuzzy compare-dest= copy-dest= link-dest= \
         z,compress no-compress compress-choice= zc= compress-level= zl= skip-compress= \
         C,cvs-exclude f,filter= F exclude= exclude-from= include= include-from= files-from= \
         0,from0 old-args s,secluded-args trust-sender copy-as= address= port= sockopts= \
         blocking-io outbuf= stats 8,8-bit-output h,human-readable progress P \
         i,itemize-changes M,remote-option= out-format= log-file=:write log-file-format= \
         password-file= early-input= list-only bwlimit= stop-after= stop-at= fsync \
         write-batch=:write only-write-batch=:write read-batch= protocol= iconv= \
         checksum-seed= 4,ipv4 6,ipv6 V",
    ),
    RawSpec {
        bundled_first: true,
        ..spec(
            &["tar", "bsdtar", "gtar"],
            Operands::Own,
            "A,catenate,concatenate c,create d,diff,compare delete r,append t,list test-label \
         u,update x,extract,get C,directory= f,file= a,auto-compress I,use-compress-program=:command \
         j,bzip2 J,xz lzip lzma lzop z,gzip,gunzip,ungzip Z,compress,uncompress zstd \
         v,verbose k,keep-old-files keep-newer-files skip-old-files overwrite \
         overwrite-dir no-overwrite-dir U,unlink-first recursive-unlink remove-files:mutate \
         O,to-stdout to-command=:command checkpoint=? checkpoint-action=:action \
         F,info-script,new-volume-script=:run rsh-command=:command T,files-from= X,exclude-from= \
         exclude= strip-components= transform,xform= wildcards no-wildcards anchored \
         no-anchored p,preserve-permissions,same-permissions no-same-permissions \
         same-owner no-same-owner numeric-owner owner= group= mode= mtime= \
         m,touch h,dereference hard-dereference P,absolute-names null no-null \
         b,blocking-factor= B,read-full-records i,ignore-zeros ignore-failed-read \
         format= H= o,old-archive,portability posix sparse S W,verify w,interactive,confirmation \
         totals=? show-transformed-names show-stored-names index-file=:write \
         one-file-system l,check-links no-recursion recursion warning= \
         exclude-vcs exclude-backups exclude-caches sort= s,same-order,preserve-order \
         full-time utc quoting-style= delay-directory-restore no-delay-directory-restore \
         restrict no-unquote unquote seek no-seek level= listed-incremental=:write \
         g= G,incremental N,newer,after-date= newer-mtime= K,starting-file= M,multi-volume \
         L,tape-length= R,block-number V,label= backup=? suffix= occurrence=? \
         xattrs no-xattrs selinux no-selinux acls no-acls atime-preserve=? \
         ignore-command-error no-ignore-command-error",
        )
    },
];

/// Programs and their compiled specs, or why the table does not compile.
fn compiled() -> &'static Result<HashMap<&'static str, Spec>, String> {
    static SPECS_BY_NAME: OnceLock<Result<HashMap<&'static str, Spec>, String>> = OnceLock::new();
    SPECS_BY_NAME.get_or_init(|| {
        let mut out = HashMap::new();
        let tables = [SPECS, super::runners::RUNNERS, super::rewriters::REWRITERS];
        for raw in tables.iter().flat_map(|t| t.iter()) {
            let options = compile_options(raw.options, raw.names)?;
            for name in raw.names {
                let spec = Spec {
                    operands: raw.operands,
                    stop_at_operand: raw.stop_at_operand,
                    abbreviate: raw.abbreviate,
                    unknown_harmless: raw.unknown_harmless,
                    bundled_first: raw.bundled_first,
                    options: options.clone(),
                    runs: raw.runs,
                };
                if out.insert(*name, spec).is_some() {
                    return Err(format!("the program {name} has two specs"));
                }
            }
        }
        Ok(out)
    })
}

/// Checks the table (called when the classifier is built).
pub(super) fn check() -> Result<(), String> {
    compiled().as_ref().map(|_| ()).map_err(|e| e.clone())?;
    super::git::check()
}

/// Every program of the table with its spec, by name.
#[cfg(test)]
pub(super) fn all() -> Vec<(&'static str, &'static Spec)> {
    let mut out: Vec<(&'static str, &'static Spec)> = match compiled() {
        Ok(map) => map.iter().map(|(n, s)| (*n, s)).collect(),
        Err(_) => Vec::new(),
    };
    out.sort_by_key(|(n, _)| *n);
    out
}

/// The spec of `program`, if the table has one (and compiles).
pub(super) fn spec_of(program: &str) -> Option<&'static Spec> {
    compiled().as_ref().ok()?.get(program)
}

pub(super) fn compile_options(text: &'static str, names: &[&str]) -> Result<Vec<Opt>, String> {
    let program = names.first().copied().unwrap_or("?");
    let mut out: Vec<Opt> = Vec::new();
    for token in text.split_whitespace().chain(COMMON.split_whitespace()) {
        let (head, effect) = match token.split_once(':') {
            None => (token, Effect::Plain),
            Some((h, e)) => (
                h,
                match e {
                    "write" => Effect::Write,
                    "run" => Effect::Run,
                    "command" => Effect::Command,
                    "action" => Effect::Action,
                    "mutate" => Effect::Mutate,
                    "recursive" => Effect::Recursive,
                    "unguard" => Effect::Unguard,
                    "query" => Effect::Query,
                    "code" => Effect::Code,
                    "split" => Effect::Split,
                    "chdir" => Effect::Chdir,
                    "root" => Effect::Root,
                    "login" => Effect::Login,
                    "shell" => Effect::Shell,
                    "edit" => Effect::Edit,
                    "inplace" => Effect::InPlace,
                    other => return Err(format!("{program}: unknown effect `{other}`")),
                },
            ),
        };
        let (names, takes) = if let Some(n) = head.strip_suffix("=?") {
            (n, Takes::Attached)
        } else if let Some(n) = head.strip_suffix('=') {
            (n, Takes::Value)
        } else {
            (head, Takes::Nothing)
        };
        let mut opt = Opt {
            short: Vec::new(),
            long: Vec::new(),
            takes,
            effect,
        };
        for n in names.split(',') {
            let mut chars = n.chars();
            match (chars.next(), chars.next()) {
                (Some(c), None) => opt.short.push(c),
                (Some(_), Some(_)) => opt.long.push(n),
                (None, _) => return Err(format!("{program}: an empty option name in `{token}`")),
            }
        }
        let clash = out.iter().any(|o| {
            o.short.iter().any(|c| opt.short.contains(c))
                || o.long.iter().any(|l| opt.long.contains(l))
        });
        if clash {
            // `help` and `version` are everyone's; a program listing them again is fine.
            if COMMON.split_whitespace().any(|c| c == token) {
                continue;
            }
            return Err(format!("{program}: the option `{token}` is listed twice"));
        }
        out.push(opt);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_compiles() {
        assert_eq!(check(), Ok(()));
        let sort = spec_of("sort").expect("sort");
        let output = sort
            .options
            .iter()
            .find(|o| o.long.contains(&"output"))
            .expect("--output");
        assert_eq!(output.short, vec!['o']);
        assert_eq!(output.takes, Takes::Value);
        assert_eq!(output.effect, Effect::Write);
        assert!(spec_of("chgrp").is_some());
        assert!(spec_of("cat").is_none());
    }

    #[test]
    fn bad_tokens_are_refused() {
        assert!(compile_options("o,output=:explode", &["x"]).is_err());
        assert!(compile_options("o o", &["x"]).is_err());
        assert!(compile_options(",x", &["x"]).is_err());
    }
}
