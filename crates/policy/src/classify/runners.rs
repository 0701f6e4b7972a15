//! Programs that run their arguments, as data (docs/design.md, "Modes and the classifier").
//!
//! Each runner lists the options that take a value, so that the program it runs is found
//! however the options are spelled, and says how its operands are read (`specs::Runs`): the
//! operands before the command (timeout's DURATION), whether they are a command, a shell's
//! arguments or words a shell joins, and what it does given no command. Option effects say
//! which options carry shell code (`su -c`), change the command's directory or root, or run
//! nothing (`taskset -p`). A runner is at least as bad as what it runs; one that runs as
//! another user, in other namespaces, another root or a service is at least `ShellComplex`.
//!
//! A program not listed here that gets arguments looking like a command (`mytool rm -rf /`)
//! is read by `Walk::unknown_program`.

use super::specs::{runner, Before, RawSpec, Runs, Shape, RUNS};

/// The runners of coreutils, util-linux and their kin.
pub(super) const RUNNERS: &[RawSpec] = &[
    runner(
        &["env"],
        "i,ignore-environment 0,null u,unset= C,chdir=:chdir S,split-string=:split v,debug \
         a,argv0= block-signal=? default-signal=? ignore-signal=? list-signal-handling",
        Runs {
            dash: Some("ignore-environment"),
            assignments: true,
            ..RUNS
        },
    ),
    // `nice -5` is the old spelling of `nice -n 5`.
    runner(&["nice"], "n,adjustment= 0 1 2 3 4 5 6 7 8 9", RUNS),
    runner(
        &["nohup", "nocache", "eatmydata", "catchsegv", "chronic"],
        "",
        RUNS,
    ),
    runner(&["unbuffer"], "p", RUNS),
    runner(
        &["timeout"],
        "f,foreground k,kill-after= p,preserve-status s,signal= v,verbose",
        Runs {
            before: Before::Skip(1),
            ..RUNS
        },
    ),
    runner(&["stdbuf"], "i,input= o,output= e,error=", RUNS),
    runner(
        &["time"],
        "f,format= o,output=:write a,append p,portability v,verbose q,quiet",
        RUNS,
    ),
    runner(&["command", "builtin"], "p v:query V:query", RUNS),
    runner(
        &["exec"],
        "c l a=",
        Runs {
            elsewhere: true,
            ..RUNS
        },
    ),
    runner(
        &["sudo"],
        "u,user= g,group= E,preserve-env=? H,set-home i,login:shell s,shell:shell \
         n,non-interactive k,reset-timestamp b,background p,prompt= S,stdin A,askpass \
         D,chdir=:chdir C,close-from= h,host= P,preserve-groups T,command-timeout= R,chroot=:root \
         l,list:query v,validate:query K,remove-timestamp:query e,edit:edit U,other-user= \
         r,role= t,type= B,bell N,no-update",
        Runs {
            elsewhere: true,
            ..RUNS
        },
    ),
    runner(
        &["sudoedit"],
        "u,user= g,group= n,non-interactive k,reset-timestamp p,prompt= S,stdin A,askpass \
         C,close-from= h,host= T,command-timeout= r,role= t,type= B,bell N,no-update",
        Runs {
            shape: Shape::Files(""),
            elsewhere: true,
            ..RUNS
        },
    ),
    runner(
        &["doas"],
        "u= n s:shell C=:query L:query",
        Runs {
            elsewhere: true,
            ..RUNS
        },
    ),
    runner(
        &["pkexec"],
        "user= disable-internal-agent keep-cwd",
        Runs {
            elsewhere: true,
            ..RUNS
        },
    ),
    runner(
        &["setsid"],
        "c,ctty f,fork w,wait",
        Runs {
            elsewhere: true,
            ..RUNS
        },
    ),
    // GNU and busybox take `-e` and `-i` with an attached value only.
    runner(
        &["xargs"],
        "0,null a,arg-file= d,delimiter= E= e,eof=? I= i,replace=? L= l,max-lines=? \
         n,max-args= o,open-tty P,max-procs= p,interactive process-slot-var= \
         r,no-run-if-empty s,max-chars= show-limits t,verbose x,exit",
        RUNS,
    ),
    runner(
        &["unshare"],
        "m,mount=? u,uts=? i,ipc=? n,net=? p,pid=? U,user=? C,cgroup=? T,time=? f,fork \
         kill-child=? mount-proc=? mount-binfmt=? map-user= map-users= map-group= map-groups= \
         map-auto r,map-root-user c,map-current-user propagation= setgroups= R,root=:root \
         w,wd=:chdir S,setuid= G,setgid= monotonic= boottime= keep-caps l,load-interp=",
        Runs {
            bare_shell: true,
            elsewhere: true,
            ..RUNS
        },
    ),
    runner(
        &["nsenter"],
        "t,target= m,mount=? u,uts=? i,ipc=? n,net=? p,pid=? C,cgroup=? U,user=? T,time=? \
         G,setgid= S,setuid= preserve-credentials r,root=?:root w,wd=?:chdir W,wdns= e,env \
         F,no-fork Z,follow-context a,all c,join-cgroup user-parent keep-caps",
        Runs {
            bare_shell: true,
            elsewhere: true,
            ..RUNS
        },
    ),
    runner(
        &["setpriv"],
        "d,dump:query nnp,no-new-privs ambient-caps= inh-caps= bounding-set= ruid= euid= \
         rgid= egid= reuid= regid= clear-groups keep-groups init-groups groups= securebits= \
         pdeathsig= reset-env selinux-label= apparmor-profile= landlock-access= \
         landlock-rule= seccomp-filter= ptracer=",
        Runs {
            elsewhere: true,
            ..RUNS
        },
    ),
    // `flock FILE -c CODE` or `flock FILE COMMAND`; `flock FD` alone runs nothing.
    runner(
        &["flock"],
        "s,shared x,e,exclusive u,unlock n,nb,nonblock,nonblocking w,wait,timeout= \
         E,conflict-exit-code= o,close F,no-fork verbose",
        Runs {
            before: Before::Skip(1),
            code_after: &["-c", "--command"],
            ..RUNS
        },
    ),
    runner(
        &["ionice"],
        "c,class= n,classdata= p,pid=:query P,pgid=:query u,uid=:query t,ignore",
        RUNS,
    ),
    runner(
        &["chrt"],
        "a,all-tasks b,batch d,deadline e,ext f,fifo i,idle o,other r,rr R,reset-on-fork \
         T,sched-runtime= P,sched-period= D,sched-deadline= m,max:query p,pid:query v,verbose",
        Runs {
            before: Before::Maybe,
            ..RUNS
        },
    ),
    runner(
        &["taskset"],
        "a,all-tasks c,cpu-list p,pid:query",
        Runs {
            before: Before::Maybe,
            ..RUNS
        },
    ),
    runner(
        &["chroot"],
        "groups= userspec= skip-chdir",
        Runs {
            before: Before::Root,
            bare_shell: true,
            elsewhere: true,
            ..RUNS
        },
    ),
    // `runuser -u USER COMMAND`, or su's form: `runuser [-] USER [SHELL ARGS]`, `-c CODE`.
    runner(
        &["runuser"],
        "u,user= c,command=:code session-command=:code f,fast g,group= G,supp-group= \
         l,login:login m,p,preserve-environment P,pty s,shell=:run w,whitelist-environment=",
        Runs {
            before: Before::Skip(1),
            shape: Shape::ShellArgs,
            command_with: Some("user"),
            dash: Some("login"),
            bare_shell: true,
            elsewhere: true,
            ..RUNS
        },
    ),
    runner(
        &["su"],
        "c,command=:code session-command=:code f,fast g,group= G,supp-group= l,login:login \
         m,p,preserve-environment P,pty s,shell=:run w,whitelist-environment=",
        Runs {
            before: Before::Skip(1),
            shape: Shape::ShellArgs,
            dash: Some("login"),
            bare_shell: true,
            elsewhere: true,
            ..RUNS
        },
    ),
    runner(
        &["sg"],
        "",
        Runs {
            before: Before::Skip(1),
            shape: Shape::Joined(None),
            code_after: &["-c"],
            bare_shell: true,
            elsewhere: true,
            ..RUNS
        },
    ),
    // `script [FILE]` logs a shell (or `-c CODE`) to FILE, `typescript` by default; its
    // options may follow the file.
    RawSpec {
        stop_at_operand: false,
        ..runner(
            &["script"],
            "a,append c,command=:code E,echo= e,return f,flush B,log-io=:write I,log-in=:write \
             O,log-out=:write T,log-timing=:write m,logging-format= o,output-limit= q,quiet \
             t,timing=?:write",
            Runs {
                shape: Shape::Files("typescript"),
                bare_shell: true,
                ..RUNS
            },
        )
    },
    // watch runs `sh -c` on its words joined, unless `-x`.
    runner(
        &["watch"],
        "n,interval= d,differences=? b,beep e,errexit g,chgexit q,equexit= t,no-title x,exec \
         c,color C,no-color w,no-wrap p,precise r,no-rerun s,shotsfile=:write f,follow",
        Runs {
            shape: Shape::Joined(Some("exec")),
            ..RUNS
        },
    ),
    runner(
        &["prlimit"],
        "p,pid=:query o,output= noheadings raw verbose c,core=? d,data=? e,nice=? f,fsize=? \
         i,sigpending=? l,memlock=? m,rss=? n,nofile=? q,msgqueue=? r,rtprio=? s,stack=? \
         t,cpu=? u,nproc=? v,as=? x,locks=? y,rttime=?",
        RUNS,
    ),
    runner(
        &["systemd-run"],
        "u,unit= p,property= description= slice= slice-inherit r,remain-after-exit \
         send-sighup service-type= uid= gid= nice= working-directory=:chdir d,same-dir \
         E,setenv= t,pty P,pipe q,quiet G,collect wait user system scope M,machine= H,host= \
         on-active= on-boot= on-startup= on-unit-active= on-unit-inactive= on-calendar= \
         on-clock-change on-timezone-change timer-property= path-property= socket-property= \
         no-block no-ask-password S,shell:shell expand-environment= json= v,verbose",
        Runs {
            elsewhere: true,
            ..RUNS
        },
    ),
    RawSpec {
        // runit's chpst: short options only, `-/ ROOT` and `-C DIR` among them.
        abbreviate: false,
        ..runner(
            &["chpst"],
            "u= U= b= e= /=:root C=:chdir n= l= L= m= d= o= p= f= c= r= t= v P 0 1 2",
            Runs {
                elsewhere: true,
                ..RUNS
            },
        )
    },
    runner(
        &["setarch"],
        "v,verbose R,addr-no-randomize F,fdpic-funcptrs Z,mmap-page-zero \
         L,addr-compat-layout X,read-implies-exec B,32bit I,short-inode S,whole-seconds \
         T,sticky-timeouts 3,3gb 4gb uname-2.6 list:query show=?:query",
        Runs {
            before: Before::Skip(1),
            bare_shell: true,
            ..RUNS
        },
    ),
    runner(
        &["linux32", "linux64", "i386", "x86_64", "uname26"],
        "v,verbose R,addr-no-randomize F,fdpic-funcptrs Z,mmap-page-zero \
         L,addr-compat-layout X,read-implies-exec B,32bit I,short-inode S,whole-seconds \
         T,sticky-timeouts 3,3gb 4gb uname-2.6",
        Runs {
            bare_shell: true,
            ..RUNS
        },
    ),
    RawSpec {
        // The dynamic loader runs any program: `ld-linux-x86-64.so.2 /bin/rm`.
        abbreviate: false,
        ..runner(
            &["ld.so"],
            "list:query verify:query library-path=:run inhibit-rpath=:run audit=:run \
             preload=:run argv0= inhibit-cache glibc-hwcaps-prepend=:run glibc-hwcaps-mask= \
             list-tunables:query list-diagnostics:query",
            Runs {
                elsewhere: true,
                ..RUNS
            },
        )
    },
    runner(
        &["fakeroot"],
        "l,lib=:run faked=:run i= s=:write u,unknown-is-real b=",
        Runs {
            bare_shell: true,
            ..RUNS
        },
    ),
    runner(&["cgexec"], "g= sticky", RUNS),
    // Package runners: `npx rimraf DIR` runs the package's program.
    runner(
        &["npx", "bunx"],
        "y,yes no p,package= c,call=:code q,quiet",
        RUNS,
    ),
    runner(
        &["numactl"],
        "a,all i,interleave= m,membind= N,cpunodebind= C,physcpubind= l,localalloc \
         p,preferred= P,preferred-many= w,weighted-interleave= b,balancing s,show:query \
         H,hardware:query S,shm= f,file= L,length= o,offset= T,strict M,shmmode= I,shmid= \
         u,huge y,touch",
        RUNS,
    ),
    runner(
        &["strace"],
        "a= A b= c C d D e= E= f F i I= k n o=:write O= p= P= q r s= S= t T u= U= v w x X= y \
         Y z Z",
        RUNS,
    ),
    runner(
        &["xvfb-run"],
        "a,auto-servernum e,error-file=:write f,auth-file= n,server-num= l,listen-tcp \
         p,xauth-protocol= s,server-args= w,wait=",
        RUNS,
    ),
    runner(&["dbus-run-session"], "config-file= dbus-daemon=:run", RUNS),
    runner(
        &["runcon"],
        "u,user= r,role= t,type= l,range= c,compute",
        Runs {
            before: Before::Maybe,
            elsewhere: true,
            ..RUNS
        },
    ),
    RawSpec {
        // valgrind's and firejail's options are `--NAME=VALUE` or flags; none takes the next
        // word, so an unknown one cannot hide the command.
        unknown_harmless: true,
        ..runner(
            &["valgrind"],
            "q,quiet v,verbose log-file=:write xml-file=:write log-socket=",
            RUNS,
        )
    },
    RawSpec {
        unknown_harmless: true,
        ..runner(
            &["firejail"],
            "output=:write output-stderr=:write chroot=:root",
            Runs {
                elsewhere: true,
                ..RUNS
            },
        )
    },
    // capsh runs bash with the words after `--`.
    RawSpec {
        unknown_harmless: true,
        ..runner(
            &["capsh"],
            "chroot=:root launch=:run shell=:run",
            Runs {
                shape: Shape::ShellArgs,
                elsewhere: true,
                ..RUNS
            },
        )
    },
];
